"""The jobs API's dependencies (issue 30): create a job with parents, show its parents and
children with their conditions and last outcomes, replace them with a PATCH; a cycle, another
user's job or a bad shape is a 400 naming `parents`, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from scheduler.models import JobDependency

from .conftest import job_body, row_counts

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

JOBS = "/api/jobs/"


def _create(api: APIClient, **overrides: Any) -> dict[str, Any]:
    response = api.post(JOBS, job_body(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


def _edges() -> list[tuple[int, int, str]]:
    return sorted(JobDependency.objects.values_list("parent_id", "child_id", "condition"))


def test_create_with_parents__shown_on_both_jobs__no_schedule_of_its_own(api: APIClient) -> None:
    parent = _create(api, name="import")
    child = _create(
        api,
        name="report",
        cron="",
        recurring=False,
        parents=[{"job": parent["id"], "condition": "on_either"}],
    )

    assert child["parents"] == [
        {
            "job": parent["id"],
            "name": "import",
            "condition": "on_either",
            "last_outcome": "",
            "last_logical_time": None,
            "last_matched": None,
        }
    ]
    assert child["children"] == [] and child["next_run_at"] is None and child["state"] == "active"
    shown = api.get(f"{JOBS}{parent['id']}/").json()
    assert [(e["job"], e["condition"]) for e in shown["children"]] == [(child["id"], "on_either")]
    assert "parents" not in api.get(JOBS).json()["results"][0]  # the list stays lean


def test_patch_parents__replaces_them__left_out_leaves_them(api: APIClient) -> None:
    a, b = _create(api, name="a"), _create(api, name="b")
    c = _create(api, name="c", parents=[{"job": a["id"]}])

    response = api.patch(
        f"{JOBS}{c['id']}/", {"parents": [{"job": b["id"], "condition": "on_failure"}]}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert [(e["job"], e["condition"]) for e in response.json()["parents"]] == [(b["id"], "on_failure")]
    assert api.patch(f"{JOBS}{c['id']}/", {"priority": -20}, format="json").status_code == 200
    assert _edges() == [(b["id"], c["id"], "on_failure")]
    assert api.patch(f"{JOBS}{c['id']}/", {"parents": []}, format="json").json()["parents"] == []


def test_cycle__400_on_parents__nothing_written(api: APIClient) -> None:
    a = _create(api, name="a")
    b = _create(api, name="b", parents=[{"job": a["id"]}])
    before, edges = row_counts(), _edges()

    response = api.patch(f"{JOBS}{a['id']}/", {"parents": [{"job": b["id"]}], "priority": -20}, format="json")

    assert response.status_code == 400
    assert response.json() == {"parents": ["a cycle: 'b' -> 'a' -> 'b' (a job cannot wait for itself)"]}
    assert row_counts() == before and _edges() == edges
    assert api.get(f"{JOBS}{a['id']}/").json()["priority"] == -10  # the edit's other field too


def test_other_users_job__400_on_parents__nothing_written(api: APIClient, other_api: APIClient) -> None:
    theirs = _create(other_api, name="theirs")
    mine = _create(api, name="mine")
    before = row_counts()

    created = api.post(JOBS, job_body(name="new", parents=[{"job": theirs["id"]}]), format="json")
    edited = api.patch(f"{JOBS}{mine['id']}/", {"parents": [{"job": theirs["id"]}]}, format="json")

    for response in (created, edited):
        assert response.status_code == 400
        assert response.json() == {"parents": [f"job #{theirs['id']} is not one of your jobs"]}
    assert row_counts() == before and _edges() == []


@pytest.mark.parametrize(
    "parents",
    [{"job": 1}, [{"job": 1, "when": "always"}], [{"job": 1, "condition": "later"}], [{"job": True}]],
)
def test_bad_shape__400_on_parents(api: APIClient, parents: Any) -> None:
    before = row_counts()
    response = api.post(JOBS, job_body(name="new", parents=parents), format="json")
    assert response.status_code == 400 and list(response.json()) == ["parents"]
    assert row_counts() == before

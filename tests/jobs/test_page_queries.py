"""How many queries the job page, the run page, the runs API and the progress API make (issue 28's
benchmark, bench/outputs.py): a fixed number, whatever the page and however many runs, outputs and
history rows the job has. On the real database, the runs made by the services and replied with an
HTTP answer as the `http.call` agent stores it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from alerting.customer import CustomerRuleInput, customer_rule_create
from alerting.models import RuleKind
from scheduler.models import Job, Run
from scheduler.services import step_claim_due, step_reply
from scheduler.services.jobs import job_create, job_run_now

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

# More than one page of runs (20 a page): the last page is a page read by its ids first.
RUNS = 23
PARTNER = "127.0.0.1:9"
ANSWER = {
    "status": 200,
    "content_type": "application/json",
    "headers": {"content-type": "application/json", "etag": '"v1"'},
    "body": '{"ok": true, "note": "' + "x" * 3000 + '"}',
    "body_truncated": False,
}


@pytest.fixture
def http_job(user: Any, settings: Any) -> tuple[Job, list[uuid.UUID]]:
    """A customer's http.call job with RUNS completed runs, each step's answer stored, and an
    alert rule."""
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [PARTNER]
    settings.SAS_HTTP_JOB_PRIVATE_HOSTS = [PARTNER]
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name="ping",
        workflow="http.call",
        input={"method": "POST", "url": f"http://{PARTNER}/hook", "body": {"ping": True}},
        cron="0 3 * * *",
        timezone_name="Europe/Berlin",
    )
    runs = []
    for _ in range(RUNS):
        firing = job_run_now(job_id=job.pk, by_staff=False)
        assert firing.run_id is not None
        with transaction.atomic():
            (claim,) = step_claim_due(instance="test", limit=1, run_id=firing.run_id)
        step_reply(
            step_id=claim.step_id, lease=str(claim.lease), outcome="success", result=ANSWER, claim_next=False
        )
        runs.append(firing.run_id)
    assert Run.objects.filter(job=job, state=Run.State.COMPLETED).count() == RUNS
    customer_rule_create(
        owner_id=user.pk,
        data=CustomerRuleInput(
            job_id=job.pk,
            kind=RuleKind.JOB_CONSECUTIVE_FAILURES,
            threshold=3,
            min_runs=1,
            window_minutes=60,
            notify_email=True,
            webhook_url="",
            name="three in a row",
        ),
    )
    return job, runs


@pytest.mark.parametrize("page", ["", "?runs=2"])
def test_job_page__first_and_last_runs_page__eight_queries(
    web: Client, http_job: tuple[Job, list[uuid.UUID]], page: str, django_assert_max_num_queries: Any
) -> None:
    """The session, the user, the job with its runs and history counted, the page of runs, their
    outputs, the page of history, the alert rules (main made 9: the two pagers counted apart)."""
    job, _ = http_job

    # Seven for the page, one for the account's banner (a paused account, issue 30: jobs/account.py).
    with django_assert_max_num_queries(8):
        response = web.get(f"/jobs/{job.pk}/{page}")

    assert response.status_code == 200
    text = response.content.decode()
    assert "Page 2 of 2" in text if page else "Page 1 of 2" in text
    assert text.count('class="run-output"') == (RUNS - 20 if page else 20)
    assert "three in a row" in text


def test_run_page__eight_queries(
    web: Client, http_job: tuple[Job, list[uuid.UUID]], django_assert_max_num_queries: Any
) -> None:
    """The session, the user, the job, the run, its steps, their history rows, its events: the
    steps and the history are read once for the steps, outputs, attempts and timeline (main
    read the steps three times and the history twice: 10)."""
    job, runs = http_job

    # Seven for the page, one for the account's banner (a paused account, issue 30: jobs/account.py).
    with django_assert_max_num_queries(8):
        response = web.get(f"/jobs/{job.pk}/runs/{runs[3]}/")

    assert response.status_code == 200
    text = response.content.decode()
    assert 'id="outputs"' in text and "HTTP 200" in text and 'id="attempts"' in text


@pytest.mark.parametrize("page", ["", "?page=2"])
def test_runs_api__four_queries(
    api: APIClient, http_job: tuple[Job, list[uuid.UUID]], page: str, django_assert_max_num_queries: Any
) -> None:
    """The token, the job's runs counted (and the job found: 404 otherwise), the page, its
    outputs (main made 5: the whole job, with every annotation, and the count apart)."""
    job, runs = http_job

    with django_assert_max_num_queries(4):
        response = api.get(f"/api/jobs/{job.pk}/runs/{page}")

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == RUNS
    assert [r["id"] for r in body["results"]] == [str(r) for r in reversed(runs)][20 if page else 0 :][:20]
    assert all(r["outputs"][0]["status"] == 200 for r in body["results"])


def test_runs_api__another_users_job__404(
    other_api: APIClient, http_job: tuple[Job, list[uuid.UUID]]
) -> None:
    job, _ = http_job

    assert other_api.get(f"/api/jobs/{job.pk}/runs/").status_code == 404


def test_progress_api__five_queries(
    api: APIClient, http_job: tuple[Job, list[uuid.UUID]], django_assert_max_num_queries: Any
) -> None:
    """The token, the run, its forward steps (counted and their outputs taken from them), its
    checkpoints, its heartbeat statuses with the database clock (main made 8)."""
    _, runs = http_job

    with django_assert_max_num_queries(5):
        response = api.get(f"/api/runs/{runs[0]}/progress/")

    assert response.status_code == 200
    body = response.json()
    assert (body["steps_done"], body["steps_total"]) == (1, 1)
    assert body["outputs"][0]["status"] == 200

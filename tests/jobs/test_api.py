"""The jobs API: CRUD, every action, isolation between two users, the issue's bad inputs.

Real database, rolled back; the test plays no scheduler (`manual_scheduler`): runs that "run
now" starts stay Pending, which is what the overlap tests need."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory

from .conftest import BAD_INPUTS, ORDER_INPUT, WORKFLOW, job_body, probe_workflow, row_counts

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

JOBS = "/api/jobs/"


def _create(api: APIClient, **overrides: Any) -> dict[str, Any]:
    response = api.post(JOBS, job_body(**overrides), format="json")
    assert response.status_code == 201, response.json()
    return dict(response.json())


# -- CRUD ----------------------------------------------------------------------------------------


def test_create__recurring__201_with_its_schedule_and_next_run(api: APIClient, user: Any) -> None:
    response = api.post(JOBS, job_body(), format="json")

    assert response.status_code == 201, response.json()
    body = response.json()
    assert response["Location"] == body["url"] and body["url"].endswith(f"/api/jobs/{body['id']}/")
    assert body["state"] == "active" and body["recurring"] is True
    assert body["cron"] == "30 2 * * *" and body["timezone"] == "Europe/Berlin"
    assert "02:30" in body["schedule_text"] and "Europe/Berlin" in body["schedule_text"]
    assert body["next_run_at"] is not None and body["last_run"] is None
    assert body["retry_backoff"] == 10.0 and body["overlap_policy"] == "skip"
    job = Job.objects.get(pk=body["id"])
    assert job.owner_id == user.pk and job.input == {**ORDER_INPUT, "card": "tok_ok"}  # cleaned
    assert ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).count() == 1


def test_create__one_off_at_a_time__runs_once_then(api: APIClient) -> None:
    when = datetime.now(UTC) + timedelta(days=2)
    body = _create(api, name="once", cron="", recurring=False, run_at=when.isoformat())

    assert body["recurring"] is False and body["cron"] == ""
    assert body["schedule_text"].startswith("Once")
    assert datetime.fromisoformat(body["next_run_at"]) == when.replace(microsecond=when.microsecond)


def test_list_show_edit_delete(api: APIClient) -> None:
    first = _create(api, name="a")
    second = _create(api, name="b", cron="@hourly", timezone="UTC")

    listed = api.get(JOBS).json()
    shown = api.get(first["url"]).json()
    patched = api.patch(first["url"], {"cron": "*/20 * * * *", "max_retry": 2}, format="json")
    put = api.put(
        second["url"],
        {"name": "b2", "workflow": WORKFLOW, "input": ORDER_INPUT, "cron": "0 6 * * 1-5"},
        format="json",
    )
    deleted = api.delete(second["url"])
    after_delete = api.get(second["url"])

    assert listed["count"] == 2 and [j["name"] for j in listed["results"]] == ["b", "a"]  # newest first
    assert shown["id"] == first["id"] and shown["name"] == "a"
    assert patched.status_code == 200, patched.json()
    assert patched.json()["cron"] == "*/20 * * * *" and patched.json()["max_retry"] == 2
    # Recomputed from the new schedule (minutes 0, 20, 40: never the first one's minute 30).
    assert patched.json()["next_run_at"] != first["next_run_at"]
    assert put.status_code == 200 and put.json()["name"] == "b2" and put.json()["cron"] == "0 6 * * 1-5"
    assert deleted.status_code == 204 and after_delete.status_code == 404
    assert list(Job.objects.values_list("name", flat=True)) == ["a"]


def test_edit__recurring_false__becomes_one_off(api: APIClient) -> None:
    job = _create(api)

    response = api.patch(job["url"], {"recurring": False}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["recurring"] is False and response.json()["cron"] == ""


def test_signed_out__401(db: None) -> None:
    response = APIClient().get(JOBS)
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"


# -- actions -------------------------------------------------------------------------------------


def test_pause_with_note__then_resume__409_when_repeated(api: APIClient) -> None:
    job = _create(api)

    paused = api.post(f"{job['url']}pause/", {"note": "supplier on holiday"}, format="json")
    again = api.post(f"{job['url']}pause/", {}, format="json")
    while_paused = ScheduledJob.objects.filter(job_id=job["id"], kind=ScheduledJob.Kind.NEXT).count()
    resumed = api.post(f"{job['url']}resume/")
    resumed_again = api.post(f"{job['url']}resume/")
    history = api.get(f"{job['url']}history/", {"status": "action"})

    assert paused.status_code == 200, paused.json()
    assert paused.json()["state"] == "paused" and paused.json()["paused_note"] == "supplier on holiday"
    assert paused.json()["next_run_at"] is None and while_paused == 0
    assert again.status_code == 409 and "already paused" in again.json()["detail"]
    assert resumed.status_code == 200 and resumed.json()["state"] == "active"
    assert resumed.json()["next_run_at"] is not None
    assert resumed_again.status_code == 409
    # Who paused it and why, and who resumed it: the job's history (newest first).
    rows = [(r["reason"], r["worker"], r["detail"].get("note")) for r in history.json()["results"]]
    who = paused.wsgi_request.user.get_username()
    by = f"user {who} (api)"
    assert rows == [("resumed", by, None), ("paused", by, "supplier on holiday")]


def test_run_now__started_then_skipped_while_it_runs__runs_and_history(api: APIClient) -> None:
    job = _create(api)

    first = api.post(f"{job['url']}run-now/")
    second = api.post(f"{job['url']}run-now/")
    runs = api.get(f"{job['url']}runs/").json()
    history = api.get(f"{job['url']}history/").json()
    skipped = api.get(f"{job['url']}history/", {"status": "skipped"}).json()
    bad_filter = api.get(f"{job['url']}history/", {"status": "nope"})
    shown = api.get(job["url"]).json()

    assert first.status_code == 200 and first.json()["outcome"] == "started"
    run_id = first.json()["run_id"]
    assert Run.objects.get(pk=run_id).job_id == job["id"]
    # The first run is still pending (nobody claims it here): "skip" refuses an overlap.
    assert second.json()["outcome"] == "skipped" and second.json()["run_id"] is None
    assert [r["id"] for r in runs["results"]] == [run_id] and runs["results"][0]["state"] == "pending"
    assert {h["status"] for h in history["results"]} >= {"started", "skipped"}
    assert [h["status"] for h in skipped["results"]] == ["skipped"] and skipped["results"][0]["reason"]
    assert bad_filter.status_code == 400 and "status" in bad_filter.json()
    assert shown["last_run"]["state"] == "pending"


def test_history__filter_by_run(api: APIClient) -> None:
    job = _create(api)
    run_id = api.post(f"{job['url']}run-now/").json()["run_id"]
    api.post(f"{job['url']}run-now/")  # skipped: a row without that run

    rows = api.get(f"{job['url']}history/", {"run": run_id}).json()["results"]
    not_uuid = api.get(f"{job['url']}history/", {"run": "x"})

    assert rows and all(r["run_id"] == run_id for r in rows)
    assert not_uuid.status_code == 400 and "run" in not_uuid.json()


def test_backfill__queues_past_occurrences__bad_range_and_one_off_refused(api: APIClient) -> None:
    job = _create(api, cron="0 * * * *", timezone="UTC")
    end = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=2)
    once = _create(api, name="once", cron="", recurring=False)

    done = api.post(
        f"{job['url']}backfill/", {"start": start.isoformat(), "end": end.isoformat()}, format="json"
    )
    repeated = api.post(
        f"{job['url']}backfill/", {"start": start.isoformat(), "end": end.isoformat()}, format="json"
    )
    reversed_range = api.post(
        f"{job['url']}backfill/", {"start": end.isoformat(), "end": start.isoformat()}, format="json"
    )
    missing = api.post(f"{job['url']}backfill/", {"start": start.isoformat()}, format="json")
    one_off = api.post(
        f"{once['url']}backfill/", {"start": start.isoformat(), "end": end.isoformat()}, format="json"
    )

    assert done.status_code == 200, done.json()
    assert [datetime.fromisoformat(t) for t in done.json()["queued"]] == [
        start,
        start + timedelta(hours=1),
        end,
    ]
    assert len(repeated.json()["queued"]) == 0 and len(repeated.json()["already"]) == 3
    assert ScheduledJob.objects.filter(job_id=job["id"], reason="backfill").count() == 3
    assert reversed_range.status_code == 400 and "end" in reversed_range.json()
    assert missing.status_code == 400 and "end" in missing.json()
    assert one_off.status_code == 409


def test_preview__next_times_in_the_zone__without_saving(api: APIClient) -> None:
    response = api.get(f"{JOBS}preview/", {"cron": "30 2 * * *", "timezone": "Europe/Berlin", "count": 3})

    assert response.status_code == 200, response.json()
    body = response.json()
    assert len(body["times"]) == 3 and "02:30" in body["schedule_text"]
    for text in body["times"]:
        when = datetime.fromisoformat(text)
        assert (when.hour, when.minute) in ((2, 30), (3, 0))  # 03:00 on a spring-forward day
        assert when.utcoffset() in (timedelta(hours=1), timedelta(hours=2))
    assert Job.objects.count() == 0


def test_preview__window__naive_times_in_the_zone__offsets_as_given(api: APIClient) -> None:
    base = {"cron": "30 2 * * *", "timezone": "America/New_York", "count": 5}

    naive = api.get(f"{JOBS}preview/", {**base, "start_at": "2030-01-01T00:00", "end_at": "2030-01-03T00:00"})
    # 2030-01-01T07:00Z is 02:00 in New York: the 01-01 02:30 still fires.
    aware = api.get(f"{JOBS}preview/", {**base, "start_at": "2030-01-01T07:00:00+00:00"})
    empty = api.get(f"{JOBS}preview/", {**base, "start_at": "2030-01-01T03:00", "end_at": "2030-01-02T02:00"})

    assert naive.status_code == 200, naive.json()
    assert naive.json()["times"] == ["2030-01-01T02:30:00-05:00", "2030-01-02T02:30:00-05:00"]
    assert aware.status_code == 200 and aware.json()["times"][0] == "2030-01-01T02:30:00-05:00"
    assert empty.status_code == 200 and empty.json()["times"] == []
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"cron": "@daily", "start_at": "next tuesday"}, "start_at"),
        ({"cron": "@daily", "end_at": "2030-13-01T00:00"}, "end_at"),
        ({"cron": "@daily", "start_at": "2030-01-02T00:00", "end_at": "2030-01-01T00:00"}, "end_at"),
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * *"}, "cron"),
        ({"cron": ""}, "cron"),
        ({"cron": "@daily", "timezone": "Nowhere/Special"}, "timezone"),
        ({"cron": "@daily", "count": 0}, "count"),
        ({}, "cron"),
    ],
)
def test_preview__bad_query__400_on_the_field(api: APIClient, query: dict[str, Any], field: str) -> None:
    response = api.get(f"{JOBS}preview/", query)
    assert response.status_code == 400 and field in response.json(), response.json()


def test_preview__signed_in_page_session__allowed_but_the_rest_is_token_only(user: Any) -> None:
    client = Client()
    client.force_login(user)

    preview = client.get(f"{JOBS}preview/", {"cron": "@hourly"})
    listing = client.get(JOBS)

    assert preview.status_code == 200 and len(preview.json()["times"]) == 5
    assert listing.status_code == 401


# -- isolation -----------------------------------------------------------------------------------


def test_isolation__another_users_job__404_everywhere_and_untouched(
    api: APIClient, other_api: APIClient
) -> None:
    job = _create(api)
    url = job["url"]
    before = Job.objects.values().get(pk=job["id"])
    counts = row_counts()

    answers = {
        "get": other_api.get(url),
        "patch": other_api.patch(url, {"cron": "@daily"}, format="json"),
        "put": other_api.put(url, job_body(name="mine now"), format="json"),
        "pause": other_api.post(f"{url}pause/", {"note": "x"}, format="json"),
        "resume": other_api.post(f"{url}resume/"),
        "run-now": other_api.post(f"{url}run-now/"),
        "backfill": other_api.post(
            f"{url}backfill/", {"start": "2020-01-01T00:00:00Z", "end": "2020-01-02T00:00:00Z"}, format="json"
        ),
        "runs": other_api.get(f"{url}runs/"),
        "history": other_api.get(f"{url}history/"),
        "delete": other_api.delete(url),
    }
    others_list = other_api.get(JOBS).json()

    assert {name: r.status_code for name, r in answers.items()} == dict.fromkeys(answers, 404)
    assert all(r.json() == {"detail": "No such job."} for r in answers.values())
    assert others_list["count"] == 0
    assert Job.objects.values().get(pk=job["id"]) == before and row_counts() == counts
    assert api.get(url).status_code == 200  # the owner still has it


def test_unknown_job_ids__404(api: APIClient) -> None:
    assert api.get(f"{JOBS}999999/").status_code == 404
    assert api.get(f"{JOBS}9999999999999999999999/").status_code == 404
    assert api.get(f"{JOBS}abc/").status_code == 404


# -- bad input: 400 on its field, nothing written --------------------------------------------------


@pytest.mark.parametrize(("change", "field"), BAD_INPUTS)
def test_create__bad_input__400_on_the_field_and_nothing_written(
    api: APIClient, change: dict[str, Any], field: str
) -> None:
    counts = row_counts()

    response = api.post(JOBS, job_body(**change), format="json")

    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert row_counts() == counts


@pytest.mark.parametrize(("change", "field"), BAD_INPUTS)
def test_edit__bad_input__400_on_the_field_and_the_job_unchanged(
    api: APIClient, change: dict[str, Any], field: str
) -> None:
    job = _create(api)
    before = Job.objects.values().get(pk=job["id"])
    scheduled = list(ScheduledJob.objects.values())
    counts = row_counts()

    response = api.patch(job["url"], change, format="json")

    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert Job.objects.values().get(pk=job["id"]) == before
    assert list(ScheduledJob.objects.values()) == scheduled and row_counts() == counts


def test_create__workflow_input_errors__under_input_by_key(api: APIClient) -> None:
    response = api.post(JOBS, job_body(input={**ORDER_INPUT, "amount": "-1"}), format="json")

    assert response.status_code == 400
    assert set(response.json()) == {"input"} and "amount" in response.json()["input"], response.json()


def test_create__any_customer_schedulable_workflow__its_own_errors_under_input(api: APIClient) -> None:
    workflow = probe_workflow()
    counts = row_counts()

    refused = api.post(
        JOBS, job_body(workflow=workflow, input={"url": "ftp://x", "verb": "GET"}), format="json"
    )
    accepted = api.post(
        JOBS, job_body(workflow=workflow, input={"url": "https://example.com/"}), format="json"
    )

    assert refused.status_code == 400
    assert refused.json() == {
        "input": {"non_field_errors": ["unknown field(s): verb"], "url": ["must be an https URL"]}
    }
    assert row_counts()[0] == counts[0] + 1  # only the accepted one
    assert accepted.status_code == 201 and accepted.json()["input"] == {
        "url": "https://example.com/",
        "method": "GET",
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"max_retry": "3"}, "max_retry"),
        ({"idempotent": "yes"}, "idempotent"),
        ({"input": [1, 2]}, "input"),
        ({"workflow": "no_such_workflow"}, "workflow"),
        ({"name": ""}, "name"),
        ({"overlap_policy": "sometimes"}, "overlap_policy"),
        ({"recurring": False}, "cron"),  # a one-off job with a cron expression
        ({"idempotent": False, "overlap_policy": "allow_all"}, "overlap_policy"),
    ],
)
def test_create__more_bad_input__400_on_the_field(api: APIClient, change: dict[str, Any], field: str) -> None:
    counts = row_counts()

    response = api.post(JOBS, job_body(**change), format="json")

    assert response.status_code == 400 and field in response.json(), response.json()
    assert row_counts() == counts


def test_create__same_name_twice__400_on_name(api: APIClient) -> None:
    _create(api)
    response = api.post(JOBS, job_body(), format="json")
    assert response.status_code == 400 and "name" in response.json()
    assert Job.objects.count() == 1
    assert TaskExecutionHistory.objects.count() == 0


def test_create_and_run_now__over_the_rate__429_reads_not_throttled(api: APIClient, settings: Any) -> None:
    settings.SAS_SUBMIT_RATE = "3/minute"

    created = [api.post(JOBS, job_body(name=f"j{i}"), format="json") for i in range(3)]
    job_url = created[0].json()["url"]
    over = api.post(f"{job_url}run-now/")
    read = api.get(JOBS)

    assert [r.status_code for r in created] == [201, 201, 201]
    assert over.status_code == 429 and int(over["Retry-After"]) > 0
    assert read.status_code == 200 and read.json()["count"] == 3
    assert Run.objects.count() == 0


# -- the three defects (issue 20), as a user meets them through the API ------------------


def test_runs__a_burst_sharing_created_at__every_run_on_exactly_one_page(
    api: APIClient, settings: Any
) -> None:
    # A catch-up (backfill) of 1,000 occurrences started in one batch: the runs share created_at.
    # Without a tie-breaker the pages overlapped (about 780 distinct runs of 1,000 were shown).
    from tests.scheduler.jobs_support import dispatch

    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "RUNS_IN_FLIGHT": 0}  # 0: no limit; not what is tested
    job = _create(api, name="burst", cron="* * * * *", timezone="UTC", overlap_policy="allow_all")
    # Only the backfill's runs: the schedule's own next minute must not come due mid-test.
    ScheduledJob.objects.filter(job_id=job["id"], kind=ScheduledJob.Kind.NEXT).delete()
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    done = api.post(
        f"{job['url']}backfill/",
        {"start": (end - timedelta(minutes=999)).isoformat(), "end": end.isoformat()},
        format="json",
    )
    assert done.status_code == 200 and len(done.json()["queued"]) == 1000, done.json()
    dispatch(batch=1000)
    runs = Run.objects.filter(job_id=job["id"])
    assert runs.count() == 1000
    runs.update(created_at=runs.order_by("created_at").values_list("created_at", flat=True)[0])

    seen: list[str] = []
    url: str | None = f"{job['url']}runs/"
    while url:
        body = api.get(url).json()
        seen += [r["id"] for r in body["results"]]
        url = body["next"]

    assert len(seen) == 1000 and len(set(seen)) == 1000


def test_run_at_and_start_at_without_offset__read_in_the_jobs_zone_as_the_preview_does(
    api: APIClient,
) -> None:
    # One rule for every time a job is given (run_at, start_at, end_at, the preview's window, a
    # backfill's range): without an offset it is the job's wall clock (docs/decisions.md, record 2).
    zone = "America/New_York"
    once = _create(api, name="once", cron="", recurring=False, timezone=zone, run_at="2031-06-01T09:00:00")
    windowed = _create(
        api,
        name="window",
        cron="0 9 * * *",
        timezone=zone,
        start_at="2031-06-01T09:00:00",
        end_at="2031-06-03T09:00:00",
    )
    preview = api.get(
        f"{JOBS}preview/",
        {"cron": "0 9 * * *", "timezone": zone, "start_at": "2031-06-01T09:00:00", "count": 1},
    ).json()
    moved = api.patch(once["url"], {"run_at": "2031-06-02T09:00:00"}, format="json")
    with_offset = _create(
        api, name="offset", cron="", recurring=False, timezone=zone, run_at="2031-06-01T09:00:00Z"
    )

    nine_in_new_york = datetime(2031, 6, 1, 13, 0, tzinfo=UTC)  # EDT is UTC-4
    assert datetime.fromisoformat(once["run_at"]) == nine_in_new_york
    assert datetime.fromisoformat(once["next_run_at"]) == nine_in_new_york
    assert datetime.fromisoformat(windowed["start_at"]) == nine_in_new_york
    assert datetime.fromisoformat(windowed["end_at"]) == nine_in_new_york + timedelta(days=2)
    assert datetime.fromisoformat(windowed["next_run_at"]) == nine_in_new_york
    assert datetime.fromisoformat(preview["times"][0]) == nine_in_new_york
    assert moved.status_code == 200, moved.json()
    assert datetime.fromisoformat(moved.json()["run_at"]) == nine_in_new_york + timedelta(days=1)
    # An offset, when given, is the instant it names.
    assert datetime.fromisoformat(with_offset["run_at"]) == datetime(2031, 6, 1, 9, 0, tzinfo=UTC)

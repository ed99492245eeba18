"""Job pages that tell the truth (issue 28, item 3), through the pages and the API on the real
database, the test playing the scheduler and the agent (tests/scheduler/jobs_support.py):

- a one-off job is active while its run runs (API, list, page), finished once it has ended;
- a run that failed with nothing to undo reads Failed (run page, job page, list, history, the
  report); one that undid a step reads Compensated / Undone;
- the history and the run page speak in sentences, the raw error under "Details", the same
  error repeated as one row ("3 times");
- the step's label is the workflow's in the steps table, the attempts and the timeline;
- the run page's times and its timeline axis are in the job's zone, named;
- a one-off time in the past is refused (form and API, 400 on run_at, nothing written).
"""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.test import Client

from scheduler.dispatcher import transitions as job_transitions
from scheduler.models import Job, Run, Step
from scheduler.services import job_create, step_claim_due, step_reply
from scheduler.workflows import StepDef, Workflow, WorkflowInputError, get_workflow, register
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow
from tests.scheduler.jobs_support import dispatch

from .conftest import row_counts
from .test_pages import FORM

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

# A one-step workflow whose step has a label of its own (as http.call's "call" is "HTTP call").
LABELLED = "jobtruth_labelled"
HTTP_500 = 'GET https://api.example.test/v1/stock answered 500: {"error": "database on fire", "trace": "xyz"}'


def _labelled() -> str:
    try:
        get_workflow(LABELLED)
    except WorkflowInputError:
        register(
            Workflow(
                name=LABELLED,
                validate=lambda data: dict(data),
                customer_schedulable=True,
                steps=[
                    StepDef(
                        name="call",
                        label="Fetch the stock levels",
                        operation="agents.jobtruth.call",
                        max_failures=3,
                        backoff_base=0.0,
                        backoff_max=0.0,
                    )
                ],
            )
        )
    return LABELLED


def _one_off(user: Any, workflow: str = ENGINE_WORKFLOW, **kwargs: Any) -> Job:
    register_engine_workflow()
    data = ENGINE_INPUT if workflow == ENGINE_WORKFLOW else {}
    return job_create(
        by_staff=False, owner_id=user.pk, name="once", workflow=workflow, input=data, cron="", **kwargs
    )


def _claim(run: Run) -> Any:
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=1, run_id=run.id)
    assert claims, "nothing to claim"
    return claims[0]


def _reply(run: Run, outcome: str, error: str = "") -> None:
    claim = _claim(run)
    result: dict[str, Any] | None = {} if outcome == "success" else None
    step_reply(
        step_id=claim.step_id,
        lease=claim.lease,
        outcome=outcome,  # type: ignore[arg-type]
        result=result,
        error=error,
        claim_next=False,
    )


def _due_now(run: Run) -> None:
    """The backoff after a transient failure, skipped (the test is the clock)."""
    Step.objects.filter(run=run, process_state=Step.State.PENDING).update(not_before=job_transitions.db_now())


def _job_state_everywhere(web: Client, api: Any, job: Job) -> tuple[str, str, str]:
    listed = web.get("/jobs/").content.decode()
    row = re.search(rf'<tr data-job="{job.pk}" data-state="(\w+)"', listed)
    page = web.get(f"/jobs/{job.pk}/").content.decode()
    shown = re.search(r'id="job-state" data-state="(\w+)"', page)
    assert row and shown
    return api.get(f"/api/jobs/{job.pk}/").json()["state"], row.group(1), shown.group(1)


def test_one_off__active_while_its_run_runs__finished_once_it_ended(web: Client, api: Any, user: Any) -> None:
    job = _one_off(user)
    dispatch()  # fires it: the scheduler finishes its schedule at once
    run = Run.objects.get(job=job)
    assert Job.objects.get(pk=job.pk).finished_at is not None

    pending = _job_state_everywhere(web, api, job)
    claim = _claim(run)  # running now
    running = _job_state_everywhere(web, api, job)
    running_page = web.get(f"/jobs/{job.pk}/").content.decode()
    for _ in range(3):  # a, b, c succeed
        step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success", result={}, claim_next=False)
        if Run.objects.get(pk=run.pk).state == Run.State.COMPLETED:
            break
        claim = _claim(run)
    ended_unsettled = _job_state_everywhere(web, api, job)
    dispatch()  # settles the run
    ended = _job_state_everywhere(web, api, job)

    assert pending == ("active",) * 3
    assert running == ("active",) * 3
    assert 'id="pause-form"' in running_page and "no more runs scheduled" not in running_page
    assert ended_unsettled == ("active",) * 3  # the dispatcher has not decided on a retry yet
    assert ended == ("finished",) * 3
    assert "its last run has ended" in web.get(f"/jobs/{job.pk}/").content.decode()


def test_one_off__failed_with_a_retry_to_come__active_until_the_retry_ran(
    web: Client, api: Any, user: Any
) -> None:
    job = _one_off(user, max_retry=1, retry_backoff=3600)
    dispatch()
    run = Run.objects.get(job=job)
    _reply(run, "permanent", error="refused")
    dispatch()  # settled: a retry row, an hour away

    assert _job_state_everywhere(web, api, job) == ("active",) * 3


def _states(web: Client, job: Job, run: Run) -> dict[str, str]:
    run_page = web.get(f"/jobs/{job.pk}/runs/{run.pk}/").content.decode()
    job_page = web.get(f"/jobs/{job.pk}/").content.decode()
    listed = web.get("/jobs/").content.decode()
    head = re.search(r'id="run-state" data-state="(\w+)"><span class="badge[^"]*">([^<]+)<', run_page)
    badge = r'<span class="badge[^"]*">([^<]+)<'
    row = re.search(rf'data-run="{run.pk}" data-state="(\w+)">.*?{badge}', job_page, re.S)
    history = re.search(r'<tr data-status="(\w+)"[^>]*>.*?<span class="badge[^"]*">([^<]+)<', job_page, re.S)
    last = re.search(
        rf'<tr data-job="{job.pk}".*?class="last-run"><span class="badge badge-(\w+)">([^<]+)<', listed, re.S
    )
    assert head and row and history and last, (run_page, job_page)
    return {
        "run page": head.group(2),
        "runs table": row.group(2),
        "history": history.group(2),
        "job list": last.group(2),
    }


def test_run_failed_with_nothing_to_undo__reads_failed__one_that_undid_a_step__compensated(
    web: Client, api: Any, user: Any
) -> None:
    # The first step refused (a task that raised, a call answered 404): nothing had an effect.
    nothing = _one_off(user)
    dispatch()
    nothing_run = Run.objects.get(job=nothing)
    _reply(nothing_run, "permanent", error="nightly_export: ValueError: no rows for 2026-11-28")
    # The first step done, the second refused: the first is undone.
    undid = job_create(
        by_staff=False, owner_id=user.pk, name="undid", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, cron=""
    )
    dispatch()
    undid_run = Run.objects.get(job=undid)
    _reply(undid_run, "success")
    _reply(undid_run, "permanent", error="refused")
    _reply(undid_run, "success")  # undo_a
    dispatch()  # settled: the history rows close

    assert Run.objects.get(pk=nothing_run.pk).state == Run.State.COMPENSATED  # the engine's state
    assert Run.objects.get(pk=undid_run.pk).state == Run.State.COMPENSATED
    assert set(_states(web, nothing, nothing_run).values()) == {"Failed"}
    assert set(_states(web, undid, undid_run).values()) == {"Compensated"}
    # The timeline's run lane says the same (its hover text and its colour's status).
    nothing_page = web.get(f"/jobs/{nothing.pk}/runs/{nothing_run.pk}/").content.decode()
    timeline = nothing_page[nothing_page.index('id="timeline"') :]
    assert "Run Failed" in timeline and 'data-status="failed"' in timeline
    assert "Run Compensated" not in timeline
    # The runs API: `state` the engine's, `outcome` what the pages say, `reason` in a sentence.
    for job, run, outcome in ((nothing, nothing_run, "failed"), (undid, undid_run, "compensated")):
        (listed,) = api.get(f"/api/jobs/{job.pk}/runs/").json()["results"]
        assert (listed["id"], listed["state"], listed["outcome"]) == (str(run.pk), "compensated", outcome)
    (failed,) = api.get(f"/api/jobs/{nothing.pk}/runs/").json()["results"]
    assert failed["reason"] and failed["reason"] != failed["error"]
    assert "nightly_export: ValueError" in failed["error"]
    # The report: the failed one counted failed, the other undone.
    report = web.get("/reports/")
    assert report.status_code == 200, report.content[:500]
    figures = report.context["report"].total
    assert (figures.outcomes["failed"], figures.outcomes["compensated"]) == (1, 1)


def test_history_and_run_page__sentences__raw_detail_on_demand__repeats_grouped__labels(
    web: Client, user: Any
) -> None:
    job = _one_off(user, workflow=_labelled(), timezone_name="Asia/Kolkata")
    dispatch()
    run = Run.objects.get(job=job)
    for _ in range(3):  # the call answers 500 three times: the step gives up
        _reply(run, "transient", error=HTTP_500)
        _due_now(run)
    dispatch()

    job_page = web.get(f"/jobs/{job.pk}/").content.decode()
    run_page = web.get(f"/jobs/{job.pk}/runs/{run.pk}/").content.decode()
    history = job_page[job_page.index('id="history"') :]
    attempts = run_page[run_page.index('id="attempts"') :]
    steps = run_page[run_page.index('id="steps"') : run_page.index('id="attempts"')]
    timeline = run_page[run_page.index('id="timeline"') : run_page.index('id="attempts"')]

    sentence = "The service at api.example.test had a server error (HTTP 500 Internal Server Error)."
    # The history: the run's error in a sentence, which step (by its label), how often tried.
    assert "The step “Fetch the stock levels” failed: the service at api.example.test had a" in history
    assert "Gave up after 3 failed attempts." in history
    # The raw words on demand only: inside a <details>, never as the row's text.
    raw = "failed_transient 3 times (limit 3): GET https://api.example.test/v1/stock answered 500"
    before_details = history.split("<details")[0]
    assert raw not in before_details
    details = '<details class="raw-error"><summary>Details</summary><pre class="raw">step call failed: '
    assert details + raw in history
    # The run page: three identical attempts are one row, "3 times"; the sentence, raw under it.
    assert attempts.count("<tr data-step=") == 1 and 'data-times="3"' in attempts and "3 times" in attempts
    assert sentence in attempts and attempts.count(sentence) == 1
    assert attempts.count("database on fire") == 1  # the raw text once, in its <details>
    # The step's label, the same in the steps table, the attempts and the timeline.
    for part in (steps, attempts, timeline):
        assert "Fetch the stock levels" in part
    assert ">call<" not in steps + attempts
    # One zone on the page, named: the header and the timeline's axis in Asia/Kolkata (IST).
    assert "in Asia/Kolkata" in run_page
    assert re.search(r"started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d IST", run_page)
    assert re.search(r"since \d\d:\d\d:\d\d IST", timeline) and "UTC" not in timeline


def test_one_off_in_the_past__refused_on_run_at__form_and_api__nothing_written(
    web: Client, api: Any, user: Any
) -> None:
    register_engine_workflow()
    before = row_counts()
    past = (job_transitions.db_now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    form = {**FORM, "kind": "once", "cron": "", "run_at": past, "timezone": "UTC"}
    page = web.post("/jobs/new/", form)
    answer = api.post(
        "/api/jobs/",
        {
            "name": "late",
            "workflow": ENGINE_WORKFLOW,
            "input": ENGINE_INPUT,
            "cron": "",
            "recurring": False,
            "run_at": f"{past}:00Z",
        },
        format="json",
    )

    assert page.status_code == 400
    assert "the time is in the past" in page.context["form"].errors["run_at"][0]
    assert answer.status_code == 400, answer.content
    assert "the time is in the past" in json.dumps(answer.json()["run_at"])
    assert row_counts() == before
    # Empty: "run it at once", as documented; the current minute is not "the past".
    now_minute = job_transitions.db_now().strftime("%Y-%m-%dT%H:%M")
    assert web.post("/jobs/new/", {**form, "name": "now", "run_at": now_minute}).status_code == 302
    assert web.post("/jobs/new/", {**form, "name": "asap", "run_at": ""}).status_code == 302


def test_edit__a_one_off_that_ran__saves_without_its_past_time_refused(web: Client, user: Any) -> None:
    job = _one_off(user)
    Job.objects.filter(pk=job.pk).update(run_at=job_transitions.db_now() - timedelta(days=2))
    form = {**FORM, "kind": "once", "name": "renamed", "cron": "", "timezone": "UTC"}
    form["workflow"], form["input"] = ENGINE_WORKFLOW, json.dumps(ENGINE_INPUT)
    job.refresh_from_db()
    assert job.run_at is not None
    form["run_at"] = job.run_at.strftime("%Y-%m-%dT%H:%M")
    Job.objects.filter(pk=job.pk).update(run_at=job.run_at.replace(second=0, microsecond=0))

    saved = web.post(f"/jobs/{job.pk}/edit/", form)

    assert saved.status_code == 302, saved.context["form"].errors if saved.context else saved
    assert Job.objects.get(pk=job.pk).name == "renamed"


def test_refused_form__preview_drawn_for_the_expression_typed(web: Client, user: Any) -> None:
    typed = {**FORM, "name": "", "cron": "15 6 * * 1-5", "timezone": "Europe/Berlin"}

    refused = web.post("/jobs/new/", typed)
    bad_cron = web.post("/jobs/new/", {**typed, "cron": "61 * * * *"})
    empty = web.get("/jobs/new/")

    html = refused.content.decode()
    preview = html[html.index('id="preview"') : html.index("</ol>", html.index('id="preview"'))]
    assert refused.status_code == 400 and refused.context["form"].errors["name"]
    assert "Type a cron expression" not in preview
    assert 'data-state="ok"' in preview and "Monday through Friday" in preview
    assert len(re.findall(r"<li data-time=", preview)) == 5
    assert re.search(r"<li data-time=\"[^\"]+\">Mon \d{4}-\d\d-\d\d 06:15 \+0[12]:00</li>", preview)
    assert 'data-state="error"' in bad_cron.content.decode()
    assert "Type a cron expression to see when it runs." in empty.content.decode()

"""The job and run pages in headless Chromium against the real server (issue 28, item 3): they
update themselves while a run goes - the run finishes while the page is open and the page shows
it without a reload - the history speaks in sentences that stay inside their card with the raw
detail on demand, and the job form's preview after a refused form previews the expression typed.

The test plays the scheduler and the agent (the engine's workers are paused: `engine_paused`),
from another thread while the browser is open: Playwright's loop in this thread refuses the ORM
(tests/web/conftest.py). Screenshots `jobs-live-*.png` in the artifacts folder."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction

from scheduler.models import Job, Run
from scheduler.services import job_create, step_claim_due, step_reply
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow
from tests.scheduler.jobs_support import dispatch

from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _OVERFLOW_JS, _record_404s, _sign_in

pytestmark = pytest.mark.usefixtures("manual_scheduler")

# An HTTP-call job (the `http.call` workflow: one step "call", labelled "HTTP call") aimed at an
# allowed host; the test answers for it.
HOST = "127.0.0.1:8055"
URL = f"http://{HOST}/v2/warehouses/eu-central-1/stock-levels"
HTTP_500 = (
    f"GET {URL}?include=reserved"
    '&format=json answered 500: {"error": "internal", "detail": "upstream database connection pool '
    'exhausted after 30000 ms", "request_id": "9f1c2e0a7b3d4e5f8a9b0c1d2e3f4a5b"}'
)


def _in_thread(work: Callable[[], None]) -> None:
    """Database work while the browser is open: in its own thread (and connection)."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # re-raised below, in the test's thread
            failure.append(exc)
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the database work did not finish"
    if failure:
        raise failure[0]


def _one_off(user: Any, name: str, **kwargs: Any) -> tuple[Job, Run]:
    register_engine_workflow()
    kwargs.setdefault("workflow", ENGINE_WORKFLOW)
    kwargs.setdefault("input", ENGINE_INPUT)
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name=name,
        cron="",
        **kwargs,
    )
    dispatch()
    return job, Run.objects.get(job=job)


def _claim(run_id: Any) -> Any:
    with transaction.atomic():
        (claim,) = step_claim_due(instance="browser-test", limit=1, run_id=run_id)
    return claim


def _reply(claim: Any, outcome: str, error: str = "") -> None:
    step_reply(
        step_id=claim.step_id,
        lease=claim.lease,
        outcome=outcome,  # type: ignore[arg-type]
        result={} if outcome == "success" else None,
        error=error,
        claim_next=False,
    )


def _claim_only(run_id: Any) -> None:
    _claim(run_id)


def _reply_held(run_id: Any, outcome: str, error: str = "") -> None:
    """Reply to the attempt claimed before the page opened (the step it holds)."""
    from scheduler.models import Step

    step = Step.objects.get(run_id=run_id, process_state=Step.State.PROCESSING)
    step_reply(
        step_id=step.pk,
        lease=str(step.lease),
        outcome=outcome,  # type: ignore[arg-type]
        result={} if outcome == "success" else None,
        error=error,
        claim_next=False,
    )


def _finish(run_id: Any) -> None:
    """Play the agent: the step held succeeds, then the others; the dispatcher settles the run."""
    _reply_held(run_id, "success")
    for _ in range(2):
        _reply(_claim(run_id), "success")
    assert Run.objects.get(pk=run_id).state == Run.State.COMPLETED
    dispatch()


def _wait_for(page: Any, script: str, what: str) -> None:
    """Wait (polling the open page, never reloading it) until `script` is true."""
    for _ in range(600):
        if page.evaluate(script):
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"the page never showed {what}")


def test_browser__job_and_run_pages_update_live__history_in_sentences__preview_after_refusal(
    engine_paused: None, web_server: str, artifacts_dir: Path, settings: Any
) -> None:
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [HOST]
    user = make_user("jobslive")
    failing_job, failing_run = _one_off(
        user,
        "Stock levels sync",
        timezone_name="Asia/Kolkata",
        workflow="http.call",
        input={"method": "GET", "url": URL},
    )
    live_job, live_run = _one_off(user, "Nightly export", timezone_name="Europe/Berlin")
    _claim(live_run.pk)  # running
    shots = [artifacts_dir, Path("/tmp/jp")]
    shots[1].mkdir(exist_ok=True)

    def shoot(page: Any, name: str) -> None:
        for folder in shots:
            page.screenshot(path=str(folder / f"jobs-live-{name}.png"), full_page=True)

    with open_page(web_server) as page:
        not_found = _record_404s(page)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        _sign_in(page, user.username)

        # The job page while its one-off run is going: active, live; then the run ends and is
        # settled in the background, and the page shows the run completed and the job finished.
        page.goto(f"/jobs/{live_job.pk}/")
        page.evaluate("() => { window.__sameDocument = true; }")
        before = page.evaluate(
            "() => [document.getElementById('job-state').dataset.state,"
            " document.querySelector('#runs tbody tr').dataset.state,"
            " document.getElementById('live-root').dataset.live]"
        )
        shoot(page, "01-job-running")
        _in_thread(lambda: _finish(live_run.pk))
        _wait_for(
            page,
            "() => document.getElementById('job-state').dataset.state === 'finished'"
            " && document.querySelector('#runs tbody tr').dataset.state === 'completed'",
            "the job finished and its run completed",
        )
        same_document = page.evaluate("() => window.__sameDocument === true")
        after_live = page.get_attribute("#live-root", "data-live")
        live_hidden = "hidden" in (page.get_attribute("#live", "class") or "")
        shoot(page, "02-job-finished")

        # The run page while a run goes: its steps and state follow, without a reload.
        _in_thread(lambda: _claim_only(failing_run.pk))
        page.goto(f"/jobs/{failing_job.pk}/runs/{failing_run.pk}/")
        page.evaluate("() => { window.__sameDocument = true; }")
        run_before = page.get_attribute("#run-state", "data-state")
        shoot(page, "03-run-running")
        # Release the claim held above: it times out only later, so fail through fresh claims.
        _in_thread(lambda: _fail_after_claim(failing_run.pk))
        _wait_for(
            page,
            "() => document.getElementById('run-state').dataset.state === 'failed'",
            "the run failed",
        )
        run_same_document = page.evaluate("() => window.__sameDocument === true")
        run_text = page.locator("main").inner_text()
        step_labels = page.locator("#steps .step-label").all_inner_texts()
        timeline_lanes = page.locator("#timeline text.lane[data-lane=call]").all_text_contents()
        attempts_rows = page.locator("#attempts tbody tr").count()
        page.locator("#attempts details summary").first.click()
        raw_open = page.locator("#attempts details pre").first.inner_text()
        shoot(page, "04-run-failed")
        steps_overflow = page.evaluate(_OVERFLOW_JS, "#steps-card")

        # The job's history: a sentence, inside its card; the raw words only when asked for.
        page.goto(f"/jobs/{failing_job.pk}/")
        history_text = page.locator("#history").inner_text()
        history_overflow = page.evaluate(_OVERFLOW_JS, "#history-card")
        page.locator("#history details summary").first.click()
        history_raw = page.locator("#history details pre").first.inner_text()
        page.locator("#history-card").screenshot(path=str(shots[1] / "jobs-live-05-history.png"))
        page.locator("#history-card").screenshot(path=str(artifacts_dir / "jobs-live-05-history.png"))

        # The form refused (no name): its preview previews the cron expression typed.
        page.goto("/jobs/new/")
        page.select_option("#id_workflow", ENGINE_WORKFLOW)
        page.fill("#id_input", '{"x": 1}')
        page.fill("#id_timezone", "Europe/Berlin")
        page.fill("#id_cron", "15 6 * * 1-5")
        page.click("#save-job")
        page.wait_for_selector("#form-errors")
        _wait_for(
            page,
            "() => document.getElementById('preview').dataset.state === 'ok'",
            "the preview of the typed expression",
        )
        preview_text = page.locator("#preview-text").inner_text()
        preview_times = page.locator("#preview-times li").all_inner_texts()
        shoot(page, "06-form-refused-preview")

    assert before == ["active", "running", "fast"]
    assert same_document, "the job page was reloaded"
    assert after_live == "off" and live_hidden
    assert run_before == "running" and run_same_document
    assert "Failed" in run_text and "Compensated" not in run_text
    sentence = "The service at 127.0.0.1 had a server error (HTTP 500 Internal Server Error)."
    assert sentence in run_text
    assert attempts_rows == 1 and "3 times" in run_text
    assert step_labels == ["HTTP call"] and len(timeline_lanes) == 1 and "HTTP call" in timeline_lanes[0]
    assert "upstream database connection pool exhausted" in raw_open
    assert steps_overflow["page"] == 0 and steps_overflow["box"] == 0
    assert "The step “HTTP call” failed: the service at 127.0.0.1 had a server error" in history_text
    assert "Gave up after 3 failed attempts." in history_text
    assert "answered 500" not in history_text.split("Details")[0]
    assert "request_id" in history_raw
    assert history_overflow == {"page": 0, "box": 0}, history_overflow
    assert "Type a cron expression" not in preview_text and len(preview_times) == 5, preview_text
    assert not not_found, not_found
    assert not [e for e in errors if "Content Security Policy" in e or "Refused" in e], errors


def _fail_after_claim(run_id: Any) -> None:
    """The run's first step is held by a claim made before the page opened: that attempt fails
    (answered 500), then two more, and the step gives up."""
    from scheduler.dispatcher import transitions as job_transitions
    from scheduler.models import Step

    _reply_held(run_id, "transient", HTTP_500)
    for _ in range(2):
        Step.objects.filter(run_id=run_id, process_state=Step.State.PENDING).update(
            not_before=job_transitions.db_now()
        )
        _reply(_claim(run_id), "transient", error=HTTP_500)
    assert Run.objects.get(pk=run_id).state == Run.State.COMPENSATED
    dispatch()

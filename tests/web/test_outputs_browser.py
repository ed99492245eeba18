"""What a job's run returned, in headless Chromium (issue 28 item 2): a customer's `http.call` job
run by the real engine against the simulator's /echo, whose answer carries a `<script>` the
customer sent; the run page shows the status, the kept headers and the body excerpt (cut, with
its mark) as text, runs no script, and links the download; the job page's runs list has the
Output column. Screenshots `outputs-*.png` in the artifacts folder."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sastools.harness import wait_for
from scheduler.models import Run
from scheduler.services.jobs import job_create, job_run_now

from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _OVERFLOW_JS, _sign_in

SCRIPT = "<script>document.title='owned';alert('owned')</script>"


def test_browser__run_page__shows_the_calls_answer_escaped_and_cut(
    engine: Any, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("outputs")
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name="Echo with markup",
        workflow="http.call",
        input={
            "method": "POST",
            "url": os.environ["SIMULATOR_URL"].rstrip("/") + "/echo/outputs",
            # Long enough for the echoed answer to pass the 2 KB excerpt (not the 4 KB the agent keeps).
            "body": {"html": SCRIPT, "padding": "x" * 1800},
        },
        cron="0 3 * * *",
        timezone_name="Europe/Berlin",
    )
    firing = job_run_now(job_id=job.pk, by_staff=False)
    run_id = firing.run_id
    assert run_id is not None
    run = wait_for(
        lambda: Run.objects.filter(pk=run_id, state__in=Run.TERMINAL_STATES).first(),
        timeout=60,
        what="the job's run to end",
    )
    assert run.state == Run.State.COMPLETED, run.error

    with open_page(web_server) as page:
        dialogs: list[str] = []

        def refuse(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", refuse)
        _sign_in(page, user.username)
        page.goto(f"/jobs/{job.pk}/")
        page.wait_for_selector("#runs tbody tr")
        cell = page.locator(f"#runs tr[data-output-of='{run.pk}']").inner_text()
        runs_overflow = page.evaluate(_OVERFLOW_JS, ".card:has(#runs)")
        page.screenshot(path=str(artifacts_dir / "outputs-01-job-page.png"), full_page=True)
        page.goto(f"/jobs/{job.pk}/runs/{run.pk}/")
        page.wait_for_selector("#outputs .output")
        output = page.locator("#outputs .output").first
        status = output.locator(".output-status").inner_text()
        headers = output.locator(".output-headers").inner_text()
        body = output.locator(".output-body").inner_text()
        cut = output.locator(".output-cut").inner_text()
        scripts_in_output = page.locator("#outputs script").count()
        download = output.locator("a.output-download").get_attribute("href")
        title = page.title()
        overflow = page.evaluate(_OVERFLOW_JS, "#outputs")
        output.scroll_into_view_if_needed()
        page.screenshot(path=str(artifacts_dir / "outputs-02-run-page.png"), full_page=True)
        page.screenshot(path="/tmp/outputs-run-page.png", full_page=True)

    assert status == "HTTP 200" and "content-type" in headers and "application/json" in headers
    # The customer's markup comes back as text: shown, never run.
    assert SCRIPT in body and scripts_in_output == 0 and dialogs == [] and "owned" not in title
    assert body.startswith('{"method":"POST","path":"/echo/outputs"')
    assert cut.startswith("… (truncated, ") and cut.endswith(" in all)")
    assert download == f"/api/runs/{run.pk}/steps/{run.steps.get().pk}/output/"
    assert cell.startswith("Output HTTP 200 · {") and "(truncated)" in cell
    assert runs_overflow == {"page": 0, "box": 0}, runs_overflow  # the Output column fits the card
    assert overflow == {"page": 0, "box": 0}, overflow  # a long body wraps: nothing overflows the card
    assert json.loads(run.steps.get().result["body"])["body"] == json.dumps(
        {"html": SCRIPT, "padding": "x" * 1800}, separators=(",", ":")
    )

"""The report page and a run's timeline in headless Chromium, with data from a scripted real run:
orders and a job run by the real workers against the simulator (a retried payment, a declined
card, a clean order), then the pages read as a person reads them. Screenshots go to the
artifacts folder (reports-*.png)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from orders.models import Order
from orders.services import order_submit
from orders.workflows import ORDER_WORKFLOW
from sastools.harness import wait_for
from scheduler.models import Run, TaskExecutionHistory
from scheduler.services.jobs import job_create, job_run_submit

from ..e2e.helpers import ORDER, wait_run
from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _place_order, _sign_in

FINISHED = tuple(Run.TERMINAL_STATES)

# Per run outcome, the segments of the runs chart and the tiles, as the page shows them.
_CHART_JS = """() => {
  const segs = Array.from(document.querySelectorAll("svg.chart-runs rect.seg"));
  const counts = {};
  segs.forEach(s => {
    counts[s.dataset.outcome] = (counts[s.dataset.outcome] || 0) + Number(s.dataset.count);
  });
  const tiles = {};
  document.querySelectorAll("[data-figure]").forEach(t => {
    tiles[t.dataset.figure] = t.textContent.trim();
  });
  return {
    counts,
    tiles,
    points: document.querySelectorAll("svg.chart-durations g.point").length,
    rows: Array.from(document.querySelectorAll("#report-rows tbody tr")).map(r => r.dataset.row),
    chartWidth: document.querySelector("svg.chart-runs").getBoundingClientRect().width,
  };
}"""

# Every bar of the timeline: its lane, kind, outcome, worker and hover text.
_TIMELINE_JS = """() => Array.from(document.querySelectorAll("#timeline g.span")).map(g => ({
  lane: g.dataset.lane, kind: g.dataset.kind, status: g.dataset.status, worker: g.dataset.worker || "",
  title: g.querySelector("title").textContent,
}))"""


def _attempts(run_id: Any, step: str) -> int:
    return TaskExecutionHistory.objects.filter(
        run_id=run_id, step__name=step, kind=TaskExecutionHistory.Kind.ATTEMPT
    ).count()


def test_browser__report_page_and_order_timeline__from_a_real_run(
    engine: Any, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("rep")
    # An operator: the report page offers the user picker, and the admin's run page is theirs.
    user.is_staff = user.is_superuser = True
    user.save()
    # A payment that fails twice, then recovers: retries, a breaker deferral maybe, success.
    engine.sim.set_faults("payment", transient_rate=1.0)
    retried = order_submit(owner_id=user.pk, data=ORDER)
    wait_for(
        lambda: _attempts(retried.run_id, "charge_payment") >= 2, timeout=30, what="two payment attempts"
    )
    engine.sim.clear_faults()
    declined = order_submit(owner_id=user.pk, data={**ORDER, "card": "tok_decline"})
    clean = order_submit(owner_id=user.pk, data=ORDER)
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name="hourly restock",
        workflow=ORDER_WORKFLOW,
        input=ORDER,
        cron="0 * * * *",
    )
    job_run = job_run_submit(by_staff=False, job_id=job.pk)
    runs = [
        wait_run(r, FINISHED, timeout=60) for r in (retried.run_id, declined.run_id, clean.run_id, job_run.pk)
    ]
    states = [r.state for r in runs]
    retried_attempts = _attempts(retried.run_id, "charge_payment")

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        page.click("nav >> text=Reports")
        page.wait_for_url("**/reports/")
        page.wait_for_selector("svg.chart-runs")
        page.screenshot(path=str(artifacts_dir / "reports-01-day.png"), full_page=True)
        day = page.evaluate(_CHART_JS)
        bar_tip = page.locator("svg.chart-runs g.bar title").first.text_content()

        page.click("label.chip:has-text('Last week')")
        page.wait_for_url("**window=week**")
        page.screenshot(path=str(artifacts_dir / "reports-02-week.png"), full_page=True)
        week = page.evaluate(_CHART_JS)

        page.click("label.chip:has-text('Range')")
        page.fill("#id_start", "2026-01-05")
        page.fill("#id_end", "2026-01-01")
        page.click("#report-form button[type=submit]")
        page.wait_for_selector(".report-filters .error")
        range_error = page.locator(".report-filters .error").inner_text()
        page.screenshot(path=str(artifacts_dir / "reports-03-bad-range.png"), full_page=True)

        page.goto(f"/orders/{retried.pk}/")
        page.wait_for_selector("#timeline svg.chart-timeline")
        page.hover("#timeline g.span[data-lane=charge_payment][data-kind=attempt] >> nth=0")
        page.screenshot(path=str(artifacts_dir / "reports-04-order-timeline.png"), full_page=True)
        bars = page.evaluate(_TIMELINE_JS)
        timeline_overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")

        page.goto(f"/orders/{declined.pk}/")
        page.wait_for_selector("#timeline svg.chart-timeline")
        page.screenshot(path=str(artifacts_dir / "reports-05-declined-timeline.png"), full_page=True)
        declined_bars = page.evaluate(_TIMELINE_JS)

        # A new order, watched: its timeline is redrawn as the run moves, without a reload. The
        # shipment is slowed, so the run is still going when the page is marked (on a quiet
        # machine an order completes before the mark otherwise, and nothing is left to redraw).
        engine.sim.set_faults("shipping", latency_ms=1500)
        live_id = _place_order(page, sku="SKU-L", quantity=1, amount="7.00")
        page.evaluate("document.querySelector('#timeline .timeline-body').dataset.first = 'yes'")
        page.wait_for_selector(
            "#timeline g.span[data-lane=create_shipment][data-kind=attempt][data-status=succeeded]",
            timeout=30_000,
        )
        engine.sim.clear_faults()
        live_not_reloaded = page.evaluate("window.__notReloaded")
        live_redrawn = page.evaluate("!document.querySelector('#timeline .timeline-body').dataset.first")

        page.goto(f"/admin/scheduler/run/{retried.run_id}/change/")
        page.wait_for_selector(".sas-timeline svg.chart-timeline")
        page.screenshot(path=str(artifacts_dir / "reports-06-admin-run-timeline.png"), full_page=True)
        admin_attempts = page.locator(".sas-timeline g.span[data-kind=attempt]").count()
        picker = page.goto(f"/reports/?user={user.username}").status if page else 0

    assert states == ["completed", "compensated", "completed", "completed"]
    assert day["counts"] == {"completed": 3, "compensated": 1}  # every run, one segment each
    assert day["tiles"]["runs"] == "4" and day["tiles"]["success_rate"] == "75.0%"
    assert int(day["tiles"]["retries"]) >= retried_attempts - 1 >= 1
    assert day["points"] >= 1  # a duration point where runs finished
    assert day["rows"] == ["hourly restock", f"{ORDER_WORKFLOW} runs (not from a job)"]
    assert day["chartWidth"] > 900  # drawn at the card's width, not a thumbnail
    assert "4 runs" in (bar_tip or "") and "Completed: 3" in (bar_tip or "")
    assert week["counts"] == day["counts"]
    assert range_error == "must be after start"

    attempts = [b for b in bars if b["kind"] == "attempt"]
    lanes = [b["lane"] for b in attempts]
    # Consecutive tries that failed the same way are one bar, "attempts 1-2 ... 2 tries" (issue 21).
    tries = [int(m.group(1)) if (m := re.search(r"(\d+) tries", b["title"])) else 1 for b in attempts]
    charge_tries = [t for b, t in zip(attempts, tries, strict=True) if b["lane"] == "charge_payment"]
    assert sum(charge_tries) == retried_attempts >= 2 and len(charge_tries) >= 2
    assert lanes.count("reserve_inventory") == 1 and lanes.count("create_shipment") == 1
    assert all(b["worker"] for b in attempts)  # who claimed it, on hover
    assert [b["status"] for b in attempts if b["lane"] == "charge_payment"][-1] == "succeeded"
    assert any(b["kind"] == "wait" for b in bars)  # the backoff before a retry
    first_charge = next(b for b in attempts if b["lane"] == "charge_payment")
    assert re.search(r"attempts? 1\b", first_charge["title"]) and "claimed by" in first_charge["title"]
    assert "payment service was not available" in first_charge["title"]  # the customer's reason
    assert timeline_overflow <= 0

    declined_lanes = {(b["lane"], b["status"]) for b in declined_bars if b["kind"] == "attempt"}
    assert ("charge_payment", "failed_permanent") in declined_lanes
    assert ("release_inventory", "succeeded") in declined_lanes  # the compensation, its own lane
    assert admin_attempts == sum(tries)  # the operator's run page shows every attempt, ungrouped
    assert picker == 200
    assert live_not_reloaded is True and live_redrawn is True  # the timeline followed the run in place
    assert Run.objects.get(correlation_id=live_id).state == Run.State.COMPLETED
    assert Order.objects.filter(owner=user).count() == 4

"""The admin in a real browser: Debian's headless Chromium, driven by Playwright, against
the Procfile's web (gunicorn) on the test database. Screenshots go to the artifacts folder."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from sastools.harness import procfile_process, wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
PASSWORD = "ops-browser-password"

# How many pixels the page, and the box `selector`, are wider than what shows (0: nothing is cut
# off or needs a sideways scroll).
_OVERFLOW_JS = """(selector) => {
  const box = document.querySelector(selector);
  return {
    page: Math.max(0, document.documentElement.scrollWidth - window.innerWidth),
    box: box ? Math.max(0, box.scrollWidth - box.clientWidth) : -1,
  };
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def admin_server(live_db: None, worker_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    # The Procfile's web (gunicorn), DEBUG on as under `make run`: the project's urls serve the
    # admin's CSS and JS only then (the workers' environment turns DEBUG off, and the
    # screenshots came out unstyled).
    proc = procfile_process(
        "web", log_dir=tmp_path, env={**worker_env, "DJANGO_DEBUG": "1", "WEB_PORT": str(port)}
    ).start(ready_marker="Booting worker")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/admin/login/", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            assert proc.alive(), proc.log()[-3000:]
            return False

    try:
        wait_for(up, timeout=120, interval=0.2, what="the web to answer")  # a loaded shared machine
        yield base
    finally:
        proc.stop()


@pytest.fixture
def browser_data(live_db: None, engine_paused: None, manual_scheduler: None) -> dict[str, Any]:
    """Committed data: an operator, and orders in every interesting state."""
    from django.contrib.auth import get_user_model

    from .factories import order_completed, order_failed, order_pending, order_running

    user_model = get_user_model()
    ops, _ = user_model.objects.get_or_create(username="ops-browser", defaults={"is_staff": True})
    ops.is_staff = ops.is_superuser = True
    ops.set_password(PASSWORD)
    ops.save()
    customer, _ = user_model.objects.get_or_create(username="alice")
    data: dict[str, Any] = {"ops": ops}
    for _ in range(2):
        order_completed(customer)
    data["pending"] = order_pending(customer)
    data["running"] = order_running(customer)
    data["failed"] = order_failed(customer)
    # An open warning beside the failed run's critical alert: the index shows both severities.
    from alerting.models import Alert

    Alert.objects.create(
        kind="steps_overdue", severity="warning", message="2 steps overdue", key="browser:overdue"
    )
    return data


def test_admin__in_chromium__runs_detail_and_health(
    admin_server: str, browser_data: dict[str, Any], artifacts_dir: Path
) -> None:
    from playwright.sync_api import sync_playwright

    failed_run = str(browser_data["failed"].run_id)
    shots = artifacts_dir / "admin"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            # 1280 px: a common laptop window, where the run list was clipped and the run page
            # scrolled sideways (issue 10).
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            not_found: list[str] = []
            page.on("response", lambda r: not_found.append(r.url) if r.status == 404 else None)
            page.goto(f"{admin_server}/admin/login/?next=/admin/")
            page.fill("#id_username", "ops-browser")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#sas-engine-panel")
            # The admin's own stylesheet loaded (an unstyled admin is not one operators can use).
            assert page.evaluate(
                "() => [...document.styleSheets].some("
                "s => (s.href || '').includes('admin/css/base.css') && s.cssRules.length > 0)"
            )
            page.screenshot(path=str(shots / "01-admin-index.png"), full_page=True)
            page.locator("#sas-engine-panel").screenshot(path=str(shots / "01b-open-alerts-by-severity.png"))
            # Each severity a pill with its count, all on one line (Django's dashboard.css made
            # them full-width bars once).
            badges = page.locator("#sas-open-alerts a.sas-badge").evaluate_all(
                "els => els.map(e => { const r = e.getBoundingClientRect();"
                " return [e.dataset.severity, e.innerText, Math.round(r.top), Math.round(r.width)]; })"
            )
            header = page.locator("#site-name").inner_text()

            page.click("#sas-engine-panel >> text=Runs needing attention")
            page.wait_for_selector("#result_list")
            assert page.locator("#result_list tbody tr").count() == 1
            page.goto(f"{admin_server}/admin/scheduler/run/")
            rows = page.locator("#result_list tbody tr")
            assert rows.count() == 5
            assert page.locator("#result_list .sas-badge.sas-failed").count() == 1
            page.screenshot(path=str(shots / "02-run-changelist.png"), full_page=True)
            list_overflow = page.evaluate(_OVERFLOW_JS, "#changelist .results")
            filter_overflow = page.evaluate(_OVERFLOW_JS, "#changelist")

            page.click(f"#result_list code[title='{failed_run}']")
            page.wait_for_selector("#steps-group")
            assert page.locator("text=Resume compensation").count() >= 1
            page.screenshot(path=str(shots / "03-run-detail-failed.png"), full_page=True)
            detail_overflow = page.evaluate(_OVERFLOW_JS, "#content")

            page.goto(f"{admin_server}/admin/scheduler/run/health/")
            page.wait_for_selector("text=Circuit breakers")
            assert page.locator("input[value='Reset breaker']").count() == 3
            page.screenshot(path=str(shots / "04-engine-health.png"), full_page=True)

            page.goto(f"{admin_server}/admin/alerting/alert/")
            page.wait_for_selector("#result_list")
            page.screenshot(path=str(shots / "05-alerts.png"), full_page=True)
        finally:
            browser.close()

    assert header == "sasproject operations"
    assert [(b[0], b[1]) for b in badges] == [
        ("critical", "1 critical"),
        ("warning", "1 warning"),
        ("info", "0 info"),
    ], badges
    assert len({b[2] for b in badges}) == 1 and all(b[3] < 150 for b in badges), badges
    assert list_overflow == {"page": 0, "box": 0}, "run list clipped or scrolling sideways"
    assert filter_overflow == {"page": 0, "box": 0}, "run list filters wider than the list"
    assert detail_overflow == {"page": 0, "box": 0}, "run page wider than the window"
    assert not_found == []  # no favicon 404, nothing else missing


@pytest.fixture
def operator_data(live_db: None, engine_paused: None, manual_scheduler: None) -> dict[str, Any]:
    """Committed data for the operator's tools: a Failed run (its release in Error), two runs
    compensated after the payment outage, and a step Processing past its complete-by (the
    supervisor is paused: the sweep's dry run has something to show)."""
    from datetime import timedelta

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from scheduler.models import Step

    from .factories import order_compensated, order_failed, order_running

    user_model = get_user_model()
    ops, _ = user_model.objects.get_or_create(username="ops-browser", defaults={"is_staff": True})
    ops.is_staff = ops.is_superuser = True
    ops.set_password(PASSWORD)
    ops.save()
    customer, _ = user_model.objects.get_or_create(username="alice")
    data: dict[str, Any] = {"failed": order_failed(customer)}
    data["outage"] = [order_compensated(customer) for _ in range(2)]
    running = order_running(customer)
    # Time passes for the charge in flight: its agent started it and never answered.
    past = timezone.now() - timedelta(seconds=30)
    Step.objects.filter(run_id=running.run_id, process_state="processing").update(
        start_by=None, complete_by=past
    )
    data["overdue"] = running
    return data


def _count_runs() -> int:
    """Runs in the database, from a thread of its own (closing its connection after)."""
    from django.db import connection

    from scheduler.models import Run

    try:
        return Run.objects.count()
    finally:
        connection.close()


def _sign_in(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "ops-browser")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("#sas-engine-panel")


def test_operator_tools__in_chromium__resubmit_bulk_dry_run_and_sweep_preview(
    admin_server: str, operator_data: dict[str, Any], artifacts_dir: Path
) -> None:
    from playwright.sync_api import sync_playwright

    from ops.models import OperatorAction
    from scheduler.models import Step

    failed_run = str(operator_data["failed"].run_id)
    outage_runs = {str(o.run_id) for o in operator_data["outage"]}
    shots = artifacts_dir / "admin"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            _sign_in(page, admin_server)

            # 1. Resubmit a compensation step in Error: the button, the confirmation, the audit.
            page.goto(f"{admin_server}/admin/scheduler/run/{failed_run}/change/")
            page.click("text=Resubmit: Release the items")
            page.wait_for_selector("#operator-form")
            page.screenshot(path=str(shots / "10-resubmit-confirm.png"), full_page=True)
            page.fill("#id_reason", "inventory fixed the reservation")
            page.click("#operator-form input[type=submit]")
            page.wait_for_selector("#operator-actions tr.sas-audit")
            audit = page.locator("#operator-actions tr.sas-audit").first.inner_text()
            page.screenshot(path=str(shots / "11-run-after-resubmit.png"), full_page=True)

            # 2. Bulk: the dry run lists what it would do, changing nothing; then confirm.
            page.goto(f"{admin_server}/admin/scheduler/run/bulk-resubmit/")
            page.fill("#id_match", "service unavailable")
            page.click("#bulk-filter input[type=submit]")
            page.wait_for_selector("#bulk-plan")
            dry_heading = page.locator("#dry-run").inner_text()
            planned_rows = page.locator("#bulk-plan tr[data-plan=resubmit_run]").count()
            # (Playwright's loop runs in this thread: the ORM is asked from another one.)
            with ThreadPoolExecutor(1) as pool:
                runs_after_dry_run = pool.submit(_count_runs).result()
            page.screenshot(path=str(shots / "12-bulk-dry-run.png"), full_page=True)
            page.fill("#id_reason", "payment outage over")
            page.click("#bulk-confirm input[type=submit]")
            page.wait_for_selector("#bulk-result")
            bulk_result = page.locator("#bulk-result").inner_text()
            page.screenshot(path=str(shots / "13-bulk-done.png"), full_page=True)

            # 3. The sweep's dry run: the overdue charge would be retried, and nothing changes.
            page.goto(f"{admin_server}/admin/scheduler/run/sweep-preview/")
            page.wait_for_selector("#sweep-plan")
            decisions = page.locator("#sweep-plan tr[data-decision]").evaluate_all(
                "rows => rows.map(r => r.dataset.decision)"
            )
            why = page.locator("#sweep-plan tr[data-decision=retry] td").last.inner_text()
            page.screenshot(path=str(shots / "14-sweep-preview.png"), full_page=True)
            overflow = page.evaluate(_OVERFLOW_JS, "#content")
        finally:
            browser.close()

    assert "inventory fixed the reservation" in audit and "admin:ops-browser" in audit
    release = Step.objects.get(run_id=failed_run, name="release_inventory")
    assert release.process_state == "pending" and release.failure_count == 0
    assert dry_heading.startswith("Dry run: 2 to resubmit, 2 found") and planned_rows == 2
    assert runs_after_dry_run == 4  # failed, 2 compensated, running: the dry run wrote nothing
    assert bulk_result == "2 resubmitted, 0 refused"
    assert {
        str(r) for r in OperatorAction.objects.filter(action="resubmit_run").values_list("run_id", flat=True)
    } == (outage_runs)
    # The overdue charge is retried; the new runs' first steps, claimed with no agent running,
    # are left while within their start-by, requeued (no failure counted) once it passed - on a
    # loaded machine the page can come after it: either way, none is retried or failed.
    assert decisions[0] == "retry" and set(decisions[1:]) <= {"leave", "requeue"}
    assert "no reply before complete_by" in why and "failure 1 of" in why
    charge = Step.objects.get(run_id=operator_data["overdue"].run_id, name="charge_payment")
    assert charge.process_state == "processing"  # the dry run changed nothing
    assert overflow == {"page": 0, "box": 0}


# The boxes of the run page's title (h1, and the run under it) and of its action links, and
# how far the page is wider than the window.
_TOOLBAR_JS = """() => {
  const box = e => { const r = e.getBoundingClientRect();
    return {left: r.left, top: r.top, right: r.right, bottom: r.bottom}; };
  const titles = [...document.querySelectorAll('#content > h1, #content > h2')].map(box);
  const buttons = [...document.querySelectorAll('ul.object-tools a, #sas-run-tools a')].map(
    e => ({label: e.innerText.trim(), ...box(e)}));
  return {titles, buttons, width: window.innerWidth,
    overflow: Math.max(0, document.documentElement.scrollWidth - window.innerWidth)};
}"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    across = a["left"] < b["right"] and b["left"] < a["right"]
    return across and a["top"] < b["bottom"] and b["top"] < a["bottom"]


@pytest.fixture
def refund_refused_data(live_db: None, engine_paused: None, manual_scheduler: None) -> dict[str, Any]:
    """A Failed run whose refund was refused (the issue's page), a superuser, and a staff account
    in no role."""
    from django.contrib.auth import get_user_model

    from .factories import order_failed_refund

    user_model = get_user_model()
    ops, _ = user_model.objects.get_or_create(username="ops-browser", defaults={"is_staff": True})
    ops.is_staff = ops.is_superuser = True
    ops.set_password(PASSWORD)
    ops.save()
    nobody, _ = user_model.objects.get_or_create(username="staff-norole", defaults={"is_staff": True})
    nobody.set_password(PASSWORD)
    nobody.save()
    customer, _ = user_model.objects.get_or_create(username="alice")
    return {"failed": order_failed_refund(customer)}


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (1400, 900)])
def test_failed_run_page__at_laptop_widths__buttons_below_the_title_with_workflow_labels(
    admin_server: str, refund_refused_data: dict[str, Any], artifacts_dir: Path, width: int, height: int
) -> None:
    """Issue 28: on a Failed run the action buttons were floated over the title (Django's
    object-tools sit 48 px up, beside the h1), labelled with engine names ("Resubmit
    refund_payment"). Now a toolbar row under the title that wraps, in the workflow's words."""
    from playwright.sync_api import sync_playwright

    run_id = str(refund_refused_data["failed"].run_id)
    shots = artifacts_dir / "admin"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            _sign_in(page, admin_server)
            page.goto(f"{admin_server}/admin/scheduler/run/{run_id}/change/")
            page.wait_for_selector("#steps-group")
            page.screenshot(path=str(shots / f"20-failed-run-toolbar-{width}.png"))
            boxes = page.evaluate(_TOOLBAR_JS)
        finally:
            browser.close()

    assert len(boxes["titles"]) == 2, boxes["titles"]  # the h1 and the run under it
    covering = [(b["label"], t) for b in boxes["buttons"] for t in boxes["titles"] if _overlap(b, t)]
    assert covering == [], covering
    labels = [b["label"] for b in boxes["buttons"]]
    assert labels == [
        "Resume compensation",
        "Resubmit: Refund the card",
        "Mark done: Refund the card",
        "Mark done: Release the items",
        "Engine health",
        "History",
    ], labels
    assert all(b["left"] >= 0 and b["right"] <= boxes["width"] for b in boxes["buttons"]), boxes
    assert boxes["overflow"] == 0


def test_no_role_staff__run_page__styled_403_in_chromium_naming_the_role(
    admin_server: str, refund_refused_data: dict[str, Any], artifacts_dir: Path
) -> None:
    """Issue 28: a staff account in no role opening a run (a link in an alert) got a bare
    "403 Forbidden" with no way back. Now the admin's page, what is missing, and a link home."""
    from playwright.sync_api import sync_playwright

    run_id = str(refund_refused_data["failed"].run_id)
    shots = artifacts_dir / "admin"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{admin_server}/admin/login/?next=/admin/")
            page.fill("#id_username", "staff-norole")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#content")
            response = page.goto(f"{admin_server}/admin/scheduler/run/{run_id}/change/")
            status = response.status if response else 0
            page.screenshot(path=str(shots / "21-no-role-403.png"))
            reason = page.locator("#forbidden-reason").inner_text()
            styled = page.evaluate(
                "() => [...document.styleSheets].some("
                "s => (s.href || '').includes('admin/css/base.css') && s.cssRules.length > 0)"
            )
            header = page.locator("#site-name").inner_text()
            page.click("#forbidden-home")
            page.wait_for_load_state()
            back_at = page.url
        finally:
            browser.close()

    assert status == 403
    assert reason == "This needs the Operators (read-only) role (permission: Can view run)."
    assert styled and header == "sasproject operations"
    assert back_at == f"{admin_server}/admin/"

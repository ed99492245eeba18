"""The admin in a real browser: Debian's headless Chromium, driven by Playwright, against
the Procfile's web (gunicorn) on the test database. Screenshots go to the artifacts folder."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..harness import procfile_process, wait_for

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
        wait_for(up, timeout=30, interval=0.2, what="the web to answer")
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

            page.goto(f"{admin_server}/admin/supervisor/alert/")
            page.wait_for_selector("#result_list")
            page.screenshot(path=str(shots / "05-alerts.png"), full_page=True)
        finally:
            browser.close()

    assert header == "sasproject operations"
    assert list_overflow == {"page": 0, "box": 0}, "run list clipped or scrolling sideways"
    assert filter_overflow == {"page": 0, "box": 0}, "run list filters wider than the list"
    assert detail_overflow == {"page": 0, "box": 0}, "run page wider than the window"
    assert not_found == []  # no favicon 404, nothing else missing

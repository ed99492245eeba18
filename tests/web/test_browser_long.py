"""Long runs in headless Chromium: a catalogue reprice's progress bar moving live (real
server, real workers), the admin's run page with its pages, and the exports page.
Screenshots go to the artifacts folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalogue.models import Product
from catalogue.services import catalogue_seed
from exports.models import Export
from scheduler.models import Run

from ..orders.conftest import make_user
from .conftest import open_page

PASSWORD = "pw-for-tests-1"

_READ_BAR = """() => {
  const bar = document.getElementById("progress");
  return [Number(bar.getAttribute("aria-valuenow")), document.getElementById("run-state").dataset.state,
          document.getElementById("pages").textContent];
}"""


def _sign_in(page: Any, username: str) -> None:
    page.goto("/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/")


def test_browser__reprice_progress_bar_moves_live__admin_and_exports_pages(
    engine: Any, web_server: str, start_worker: Any, artifacts_dir: Path
) -> None:
    Product.objects.all().delete()  # the catalogue is not an engine table: live_db leaves it
    catalogue_seed(rows=10_000)  # 10 pages of 1,000
    start_worker(
        name="long-web", queues="agent.catalogue,agent.exports", concurrency=1, SAS_CATALOGUE_PAGE_DELAY="0.4"
    )
    user = make_user("long")
    user.is_staff = user.is_superuser = True
    user.save()

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        page.goto("/catalogue/")
        page.screenshot(path=str(artifacts_dir / "long-01-catalogue.png"), full_page=True)
        summary = page.locator("#summary").inner_text()
        page.fill("#id_percent", "5")
        page.click("#start-reprice")
        page.wait_for_url("**/catalogue/reprices/*/")
        run_id = page.url.rstrip("/").rsplit("/", 1)[1]
        page.evaluate("window.__notReloaded = true")
        seen: list[tuple[float, str, str]] = []
        midway_shot = False
        for _ in range(600):
            value, state, pages = page.evaluate(_READ_BAR)
            if not seen or seen[-1][0] != value or seen[-1][1] != state:
                seen.append((value, state, pages))
            if not midway_shot and 30 <= value <= 80:
                page.screenshot(path=str(artifacts_dir / "long-02-reprice-midway.png"), full_page=True)
                midway_shot = True
            if state == "completed":
                break
            page.wait_for_timeout(100)
        page.wait_for_timeout(400)  # the bar's width transition (0.3 s) ends
        page.screenshot(path=str(artifacts_dir / "long-03-reprice-done.png"), full_page=True)
        not_reloaded = page.evaluate("window.__notReloaded")
        rate = page.locator("#rate").inner_text()

        page.goto(f"/admin/scheduler/run/{run_id}/change/")
        admin_percent = page.get_attribute("#sas-long-progress", "data-percent")
        admin_text = page.locator("#sas-long-progress").inner_text()
        page.screenshot(path=str(artifacts_dir / "long-04-admin-run.png"), full_page=True)

        page.goto("/exports/")
        page.click("#request-export")
        page.wait_for_selector("#exports tbody tr")
        page.screenshot(path=str(artifacts_dir / "long-05-export-running.png"), full_page=True)
        page.wait_for_selector("#exports tbody tr[data-status=completed] a.download", timeout=30_000)
        page.screenshot(path=str(artifacts_dir / "long-06-export-done.png"), full_page=True)
        link = page.get_attribute("#exports a.download", "href")

    values = [v for v, _, _ in seen]
    assert summary.startswith("10,000 products")
    assert seen[-1][1] == "completed" and values[-1] == 100.0
    assert values == sorted(values), seen  # it only moves forward
    assert len({v for v in values if 0 < v < 100}) >= 3, seen  # seen moving, not only finished
    assert midway_shot and not_reloaded is True
    assert "products/s" in rate
    assert admin_percent == "100.0" and "pages 10 of 10" in admin_text
    run = Run.objects.get(pk=run_id)
    assert run.state == Run.State.COMPLETED and run.owner_id == user.id
    assert Product.objects.filter(repriced_count=1, last_repriced_run=run.id).count() == 10_000
    export = Export.objects.get(owner=user)
    assert link == f"/exports/{export.pk}/download/" and export.completed_at is not None
    Product.objects.all().delete()

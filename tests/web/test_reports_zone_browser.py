"""The report page in another zone, in headless Chromium (issue 28, item 4): the hand-built
history of tests/reports/history.py read in Asia/Kolkata - the header, the job's last and next
run and the charts' axis in that zone, labelled; the missed-deadlines tile adding up to its
breakdown. Screenshot `reports-zone-01-kolkata.png` in the artifacts folder."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode

from ..orders.conftest import make_user
from ..reports.history import build_user_history
from .conftest import open_page
from .test_browser import _sign_in

KOLKATA = {"start": "2026-01-04 17:30", "end": "2026-01-05 17:30", "tz": "Asia/Kolkata"}

_PAGE_JS = """() => {
  const cells = Array.from(document.querySelectorAll('#report-rows tr[data-row="nightly"] td'));
  return {
    window: document.querySelector("#report-window").textContent.trim(),
    last: cells[1].innerText.trim(),
    next: cells[2].innerText.trim(),
    tableZone: document.querySelector("#report-rows").closest("section").querySelector("h2").innerText,
    ticks: Array.from(document.querySelectorAll("svg.chart-runs text")).map(t => t.textContent),
    tip: document.querySelector("svg.chart-runs g.bar title").textContent,
    missed: document.querySelector('[data-figure="missed_deadlines"]').textContent.trim(),
    note: document.querySelector("#tile-missed .tile-note").innerText.trim(),
  };
}"""


def test_browser__report_in_asia_kolkata__times_in_that_zone__missed_tile_adds_up(
    live_db: None, engine_paused: None, web_server: str, artifacts_dir: Path
) -> None:
    # The engine paused: the history is of January 2026, so a running session engine's dispatcher
    # would fire the job's January occurrence at once and schedule the next from today
    # (make test: "30 Nov 09:30" where the built next run is "6 Jan 09:30").
    user = make_user("zone")
    build_user_history(user)

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        page.goto(f"/reports/?{urlencode(KOLKATA)}")
        page.wait_for_selector("svg.chart-runs")
        page.hover("svg.chart-runs g.bar >> nth=0")
        page.screenshot(path=str(artifacts_dir / "reports-zone-01-kolkata.png"), full_page=True)
        seen = page.evaluate(_PAGE_JS)

    assert seen["window"] == "Sun 4 Jan 17:30 \u2013 Mon 5 Jan 17:30 (Asia/Kolkata)"
    assert (seen["last"], seen["next"]) == ("5 Jan 17:29 running", "6 Jan 09:30")
    assert "times in Asia/Kolkata" in seen["tableZone"]
    assert "17:00" in seen["ticks"] and "15:00" in seen["ticks"]  # Kolkata's wall-clock hours
    # The first bar: r4, submitted 12:00 UTC, is in the 17:00-18:00 hour of Kolkata.
    assert seen["tip"].startswith("Sun 4 Jan 17:00\u201318:00 (Asia/Kolkata)\n1 run")
    parts = [int(n) for n in re.findall(r"(\d+) [a-z]", seen["note"])]
    assert int(seen["missed"]) == sum(parts) == 4, seen["note"]

"""The report in the chosen time zone, everywhere it shows a time, and the missed-deadlines tile
whose breakdown adds up to its figure (issue 28, item 4).

The hand-built history of tests/reports/history.py, read over 2026-01-04 17:30 to 2026-01-05
17:30 in Asia/Kolkata (12:00 to 12:00 UTC): the job "nightly" last ran at 11:59:59.999 UTC
(17:29 in Kolkata) and runs next at 04:00 UTC (09:30 in Kolkata); one missed deadline of each
kind, the `attempt_start` one included.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from ..orders.conftest import token_client
from .history import build_user_history, make_user

pytestmark = pytest.mark.django_db

KOLKATA = {"start": "2026-01-04 17:30", "end": "2026-01-05 17:30", "tz": "Asia/Kolkata"}


@pytest.fixture
def alice() -> Any:
    user = make_user("alice")
    build_user_history(user)
    return user


def _page(user: Any, params: dict[str, str]) -> str:
    client = Client()
    client.force_login(user)
    response = client.get("/reports/", params)
    assert response.status_code == 200
    return str(response.content.decode())


def _text(html: str) -> str:
    """What a reader sees: tags dropped, white space collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def _cells(html: str, row: str) -> list[str]:
    match = re.search(rf'<tr data-row="{re.escape(row)}">(.*?)</tr>', html, re.S)
    assert match, f"no row {row!r}"
    return [_text(cell) for cell in re.findall(r"<td[^>]*>(.*?)</td>", match.group(1), re.S)]


def _tile(html: str, figure: str) -> str:
    """The tile (its whole <div class="tile">) that holds `data-figure=figure`."""
    for chunk in html.split('<div class="tile"')[1:]:
        if f'data-figure="{figure}"' in chunk:
            return chunk.split("</div>", 1)[0]
    raise AssertionError(f"no tile {figure!r}")


def test_page__asia_kolkata__header_last_and_next_run_in_that_zone_labelled(alice: Any) -> None:
    html = _page(alice, KOLKATA)
    text = _text(html)

    # The window as asked, in Kolkata (not 12:00 UTC labelled Kolkata).
    assert "Sun 4 Jan 17:30 \u2013 Mon 5 Jan 17:30 (Asia/Kolkata)" in text
    nightly = _cells(html, "nightly")
    assert nightly[1] == "5 Jan 17:29 running"  # 11:59:59.999 UTC
    assert nightly[2] == "6 Jan 09:30"  # 04:00 UTC, the job's 09:30 in its own Kolkata cron
    assert "times in Asia/Kolkata" in text  # the table says which zone
    assert '<time datetime="2026-01-06T09:30:00+05:30"' in html
    # The charts follow the same zone, on its wall-clock hours: 09:30-10:30 UTC is 15:00-16:00.
    assert "Mon 5 Jan 15:00\u201316:00 (Asia/Kolkata)" in html
    assert 'data-start="2026-01-05T15:00:00+05:30"' in html


def test_page__utc__the_same_moments_in_utc(alice: Any) -> None:
    html = _page(alice, {"start": "2026-01-04 12:00", "end": "2026-01-05 12:00", "tz": "UTC"})

    assert "Sun 4 Jan 12:00 \u2013 Mon 5 Jan 12:00 (UTC)" in _text(html)
    nightly = _cells(html, "nightly")
    assert (nightly[1], nightly[2]) == ("5 Jan 11:59 running", "6 Jan 04:00")


def test_api__asia_kolkata__every_time_with_the_zones_offset(alice: Any) -> None:
    data = token_client(alice).get("/api/reports/", KOLKATA).json()

    assert (data["window"]["start"], data["window"]["end"]) == (
        "2026-01-04T17:30:00+05:30",
        "2026-01-05T17:30:00+05:30",
    )
    job = next(row["job"] for row in data["rows"] if row["label"] == "nightly")
    assert job["last_run"]["at"] == "2026-01-05T17:29:59.999000+05:30"
    assert job["next_run_at"] == "2026-01-06T09:30:00+05:30"
    assert data["generated_at"].endswith("+05:30")
    assert data["buckets"][0]["start"] == "2026-01-04T17:00:00+05:30"  # the first hour, cut by the window


def test_page__missed_deadlines_tile__its_breakdown_adds_up_to_it__every_kind_listed(alice: Any) -> None:
    tile = _tile(_page(alice, KOLKATA), "missed_deadlines")
    figure = int(re.search(r'data-figure="missed_deadlines">(\d+)<', tile).group(1))
    note = _text(tile.split('class="tile-note">', 1)[1])
    parts = [int(n) for n in re.findall(r"(\d+) [a-z]", note)]

    assert figure == 4  # one of each kind
    assert sum(parts) == figure, note
    assert note == "1 not started · 1 timed out · 1 steps · 1 runs"
    assert "Attempts not started by their start-by: 1" in tile  # the hover names each kind in full

"""Report figures against a hand-built history (tests/reports/history.py), window 2026-01-04
12:00 to 2026-01-05 12:00 UTC ("last day" at NOW):

| run | from  | submitted (UTC) | outcome     | duration | retries | missed deadlines          |
|-----|-------|-----------------|-------------|----------|---------|---------------------------|
| r1  | job   | 01-05 10:00     | completed   | 10 s     | 1       | 1 attempt_complete        |
| r2  | job   | 01-05 10:30     | compensated | 20 s     | 1       | 1 step_close              |
| r3  | job   | 01-05 11:59:59.999 | running  | -        | 1       | 1 attempt_start, 1 run    |
| r4  | order | 01-04 12:00 (= start, in) | completed | 5 s | 0     |                           |
| r5  | order | 01-05 12:00 (= end, out) |           |          |         |                           |
| r6  | order | 01-04 11:59:59 (out) |        |          |         |                           |
| r7  | order | 01-05 10:15     | completed   | 30 s     |         |                           |
| r8  | order | 01-05 10:45     | cancelled   | 1 s      |         |                           |
| r9  | order | 01-05 10:50     | failed      | 40 s     |         |                           |

Percentiles are nearest-rank: the value at rank ceil(p * n) of the n sorted durations.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from reports.selectors import user_report
from reports.windows import window_parse

from .history import NOW, at, build_user_history, make_run, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice() -> Any:
    user = make_user("alice")
    build_user_history(user)
    # Another user's runs in the same hours: never counted in alice's report.
    bob = make_user("bob")
    for minute in (0, 10, 20):
        make_run(bob, created=at(f"01-05 10:{minute:02d}:00"), state="failed", seconds=99)
    return user


def _report(user: Any, **params: str) -> Any:
    return user_report(user=user, window=window_parse(params, now=NOW), now=NOW)


def test_report__totals__exact_counts_rate_percentiles_retries_and_missed_deadlines(alice: Any) -> None:
    total = _report(alice).total

    assert total.runs == 7  # r1 r2 r3 r4 r7 r8 r9; not r5 (at the end), r6 (before), bob's
    assert total.outcomes == {"completed": 3, "compensated": 1, "failed": 1, "cancelled": 1, "in_progress": 1}
    assert total.success_rate == pytest.approx(3 / 5)  # cancelled and unfinished not counted
    assert total.finished == 6
    # Sorted durations 1 5 10 20 30 40: p50 = rank ceil(3) = 10 s, p95 = rank ceil(5.7) = 40 s.
    assert (total.p50, total.p95) == (10.0, 40.0)
    assert total.retries == 3
    assert total.missed == {"attempt_start": 1, "attempt_complete": 1, "step_close": 1, "run": 1}
    assert total.missed_deadlines == 4


def test_report__rows__per_job_with_last_and_next_run__and_per_workflow(alice: Any) -> None:
    report = _report(alice)
    rows = {row.label: row for row in report.rows}

    assert list(rows) == ["nightly", "one-off", "order_fulfilment runs (not from a job)"]
    nightly = rows["nightly"]
    assert nightly.figures.runs == 3
    assert nightly.figures.outcomes == {
        "completed": 1, "compensated": 1, "failed": 0, "cancelled": 0, "in_progress": 1,
    }  # fmt: skip
    assert nightly.figures.success_rate == pytest.approx(0.5)
    assert (nightly.figures.p50, nightly.figures.p95) == (10.0, 20.0)  # ranks 1 and 2 of [10, 20]
    assert nightly.figures.retries == 3 and nightly.figures.missed_deadlines == 4
    assert nightly.job is not None
    assert nightly.job.last_run_at == at("01-05 11:59:59.999") and nightly.job.last_run_state == "running"
    # 09:30 in Kolkata (04:00 UTC) the next morning; the report is at 17:30 there.
    assert nightly.job.next_run_at == datetime(2026, 1, 6, 9, 30, tzinfo=ZoneInfo("Asia/Kolkata"))

    one_off = rows["one-off"]
    assert one_off.figures.runs == 0 and one_off.figures.success_rate is None and one_off.figures.p50 is None
    assert one_off.job is not None and one_off.job.last_run_at is None and one_off.job.next_run_at is None

    orders = rows["order_fulfilment runs (not from a job)"].figures
    assert orders.runs == 4
    assert orders.outcomes == {
        "completed": 2,
        "compensated": 0,
        "failed": 1,
        "cancelled": 1,
        "in_progress": 0,
    }
    assert orders.success_rate == pytest.approx(2 / 3)
    assert (orders.p50, orders.p95) == (5.0, 40.0)  # sorted 1 5 30 40: ranks 2 and 4
    assert orders.retries == 0 and orders.missed_deadlines == 0


def test_report__hourly_buckets__edges_and_empty_hours(alice: Any) -> None:
    report = _report(alice)
    buckets = report.buckets

    assert report.window.bucket == timedelta(hours=1)
    assert len(buckets) == 24  # the window starts on the hour: 12:00 .. 11:00, nothing cut
    assert buckets[0].start == at("01-04 12:00:00") and buckets[-1].end == NOW
    by_start = {b.start.astimezone(UTC).strftime("%d %H:%M"): b for b in buckets if b.runs}
    assert set(by_start) == {"04 12:00", "05 10:00", "05 11:00"}
    assert by_start["04 12:00"].outcomes["completed"] == 1  # r4, submitted exactly at the start
    ten = by_start["05 10:00"]
    assert ten.outcomes == {"completed": 2, "compensated": 1, "failed": 1, "cancelled": 1, "in_progress": 0}
    assert (ten.p50, ten.p95) == (20.0, 40.0)  # sorted 1 10 20 30 40: ranks 3 and 5
    assert by_start["05 11:00"].outcomes["in_progress"] == 1 and by_start["05 11:00"].p50 is None
    assert sum(b.runs for b in buckets) == report.total.runs


def test_report__time_zone__buckets_on_local_hours(alice: Any) -> None:
    """Kolkata is UTC+5:30: its hours start at :30 UTC, and the window (17:30 to 17:30 there)
    cuts its first and last hour."""
    report = _report(alice, tz="Asia/Kolkata")
    buckets = report.buckets
    local = ZoneInfo("Asia/Kolkata")

    assert len(buckets) == 25
    assert buckets[0].start == datetime(2026, 1, 4, 17, 0, tzinfo=local)
    assert buckets[-1].start == datetime(2026, 1, 5, 17, 0, tzinfo=local)
    counts = {b.start.strftime("%d %H:%M"): b.outcomes for b in buckets if b.runs}
    assert counts == {
        "04 17:00": {"completed": 1, "compensated": 0, "failed": 0, "cancelled": 0, "in_progress": 0},  # r4
        "05 15:00": {
            "completed": 2,
            "compensated": 0,
            "failed": 0,
            "cancelled": 0,
            "in_progress": 0,
        },  # r1 r7
        "05 16:00": {
            "completed": 0,
            "compensated": 1,
            "failed": 1,
            "cancelled": 1,
            "in_progress": 0,
        },  # r2 r8 r9
        "05 17:00": {"completed": 0, "compensated": 0, "failed": 0, "cancelled": 0, "in_progress": 1},  # r3
    }
    assert report.total.runs == 7  # the same runs: a time zone moves buckets, not the window


def test_report__custom_range_and_short_window__bucket_width(alice: Any) -> None:
    hour = _report(alice, window="hour")
    assert hour.window.bucket == timedelta(minutes=5) and len(hour.buckets) == 12
    assert hour.total.runs == 1  # r3 only (11:59:59.999)

    week = _report(alice, start="2026-01-01", end="2026-01-10")  # end date: through the 10th
    assert week.window.end == datetime(2026, 1, 11, tzinfo=UTC)
    assert week.window.bucket == timedelta(days=1) and len(week.buckets) == 10
    assert week.total.runs == 9  # r5 and r6 too


def test_report__as_dict__the_api_shape(alice: Any) -> None:
    data = _report(alice).as_dict()

    assert data["total"]["missed_deadlines_by_kind"] == {
        "attempt_start": 1, "attempt_complete": 1, "step_close": 1, "run": 1,
    }  # fmt: skip
    assert data["window"]["bucket_seconds"] == 3600 and data["window"]["tz"] == "UTC"
    nightly = data["rows"][0]
    assert nightly["job"]["schedule"] == "30 9 * * *"
    assert nightly["job"]["last_run"]["state"] == "running"
    assert nightly["duration_p95_seconds"] == 20.0 and nightly["success_rate"] == 0.5


def test_report__paginated_step__next_pages_are_not_retries_a_failed_page_is() -> None:
    # Four pages of a reprice: pages 1-3 each ended 'continued' (their next page is attempt
    # n+1, no retry); page 4 failed once (transient) and its second try succeeded: 1 retry.
    from .history import attempt, make_step

    carol = make_user("carol")
    run = make_run(
        carol, created=at("01-05 10:00:00"), state="completed", seconds=9, workflow="catalogue.reprice"
    )
    step = make_step(run, "reprice_products")
    statuses = ["continued", "continued", "continued", "failed_transient", "succeeded"]
    for number, status in enumerate(statuses, start=1):
        attempt(step, number, status, at(f"01-05 10:00:0{number}"))

    assert _report(carol).total.retries == 1

"""Cron arithmetic (cronsim) in the job's time zone: a table of cases and their UTC instants,
daylight saving included, and the expressions that are refused."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from scheduler.dispatcher.cron import cron_between, cron_error, cron_latest, cron_next, zone_error


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


# (expression, zone, after (UTC), the next fire times (UTC))
CASES = [
    # Europe/Berlin springs forward on 2026-03-29 (02:00 CET -> 03:00 CEST): 02:30 does not
    # exist that day; the job fires once, at 03:00 CEST (the first instant after the gap).
    ("30 2 * * *", "Europe/Berlin", utc(2026, 3, 28, 12), [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]),
    # ...and falls back on 2026-10-25 (03:00 CEST -> 02:00 CET): 02:30 happens twice; it fires once.
    (
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 12),
        [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)],
    ),
    # Hourly: every real hour across both changes (no hour lost, none doubled).
    (
        "0 * * * *",
        "Europe/Berlin",
        utc(2026, 3, 28, 22, 30),
        [utc(2026, 3, 28, 23), utc(2026, 3, 29, 0), utc(2026, 3, 29, 1), utc(2026, 3, 29, 2)],
    ),
    (
        "0 * * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 22, 30),
        [utc(2026, 10, 24, 23), utc(2026, 10, 25, 0), utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)],
    ),
    ("@hourly", "Europe/Berlin", utc(2026, 10, 25, 0, 10), [utc(2026, 10, 25, 1), utc(2026, 10, 25, 2)]),
    # America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
    ("30 2 * * *", "America/New_York", utc(2026, 3, 7, 12), [utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)]),
    (
        "30 1 * * *",
        "America/New_York",
        utc(2026, 10, 31, 12),
        [utc(2026, 11, 1, 5, 30), utc(2026, 11, 2, 6, 30)],
    ),
    # No daylight saving: weekdays at 09:00 in Tokyo (UTC+9), Friday -> Monday.
    ("0 9 * * 1-5", "Asia/Tokyo", utc(2026, 1, 9, 1), [utc(2026, 1, 12, 0), utc(2026, 1, 13, 0)]),
    # Aliases.
    ("@daily", "UTC", utc(2026, 1, 1, 10), [utc(2026, 1, 2), utc(2026, 1, 3)]),
    ("@midnight", "Europe/Berlin", utc(2026, 1, 1, 10), [utc(2026, 1, 1, 23), utc(2026, 1, 2, 23)]),
    ("@weekly", "UTC", utc(2026, 1, 1), [utc(2026, 1, 4), utc(2026, 1, 11)]),  # Sundays
    ("@monthly", "UTC", utc(2026, 1, 15), [utc(2026, 2, 1), utc(2026, 3, 1)]),
    ("@yearly", "UTC", utc(2026, 1, 15), [utc(2027, 1, 1), utc(2028, 1, 1)]),
    ("@ANNUALLY", "UTC", utc(2026, 1, 15), [utc(2027, 1, 1)]),
    ("*/15 * * * *", "UTC", utc(2026, 1, 1, 10, 0), [utc(2026, 1, 1, 10, 15), utc(2026, 1, 1, 10, 30)]),
    # The last day of February in a leap year, from Berlin's midnight.
    ("0 0 29 2 *", "Europe/Berlin", utc(2026, 1, 1), [utc(2028, 2, 28, 23)]),
]


@pytest.mark.parametrize(("expression", "zone", "after", "expected"), CASES)
def test_cron__fire_times__are_the_expected_utc_instants(expression, zone, after, expected):
    found, more = cron_between(expression, zone, after=after, until=expected[-1], limit=100)

    assert found == expected and not more
    assert all(t.tzinfo is not None and t.utcoffset().total_seconds() == 0 for t in found)
    assert cron_next(expression, zone, after) == expected[0]


def test_cron_latest__the_spring_forward_occurrence__is_found_backwards_too():
    assert cron_latest("30 2 * * *", "Europe/Berlin", at_or_before=utc(2026, 3, 29, 12)) == utc(
        2026, 3, 29, 1
    )
    assert cron_latest("0 * * * *", "UTC", at_or_before=utc(2026, 1, 1, 10)) == utc(2026, 1, 1, 10)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "bad minute"),
        ("*/0 * * * *", "bad minute"),
        ("* * * * * *", "five fields"),
        ("* * * *", "five fields"),
        ("", "needs a cron expression"),
        ("   ", "needs a cron expression"),
        ("@fortnightly", "unknown alias"),
        ("0 0 30 2 *", "bad day-of-month"),
        ("0 25 * * *", "bad hour"),
        ("0 0 * 13 *", "bad month"),
        ("0 0 * * 8", "bad day-of-week"),
    ],
)
def test_cron_error__bad_expression__says_which_part(expression, message):
    why = cron_error(expression)

    assert why is not None and message in why


@pytest.mark.parametrize(
    "expression", ["* * * * *", "0 */2 * * *", "0 9 * * MON-FRI", "@daily", "5,35 1-3 * JAN *"]
)
def test_cron_error__good_expression__none(expression):
    assert cron_error(expression) is None


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "utc ", "Europe/Berlinn"])
def test_zone_error__unknown_zone__refused(zone):
    assert zone_error(zone) is not None

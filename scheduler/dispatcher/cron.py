"""Cron arithmetic for jobs, on the `cronsim` library (Debian cron's semantics, zoneinfo time zones).

Five fields (minute hour day-of-month month day-of-week) or one of the usual aliases, read in an
IANA time zone; every instant returned is an aware datetime in UTC. Daylight saving follows
cron (and cronsim): a time that does not exist on the spring-forward day fires at the first
instant after the gap; a time that happens twice on the fall-back day fires once (the first);
expressions with a wildcard hour fire every real hour.

Nothing here reads a clock: the caller passes the instants (the database's now, on the engine's
paths).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

if TYPE_CHECKING:
    from scheduler.models import Job

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

FIELDS = "minute hour day-of-month month day-of-week"

# Every date a person gives the scheduler (a job's times, a backfill's or a preview's window, a
# report's range) has its own wall-clock year in this range. Python's datetime ends at year
# 9999 and begins at year 1: a window, a zone's offset or a cron search from a date near either
# end overflowed, a 500 (issue 18). The year is checked before any arithmetic.
YEAR_MIN, YEAR_MAX = 1970, 2999


def year_error(moment: date) -> str | None:
    """Why `moment` (a date or date-time) is out of the scheduler's years, or None."""
    if not YEAR_MIN <= moment.year <= YEAR_MAX:
        return f"must be between the years {YEAR_MIN} and {YEAR_MAX}"
    return None


def cron_normalise(expression: str) -> str:
    """Whitespace collapsed; an alias in lower case."""
    text = " ".join(expression.split())
    return text.lower() if text.startswith("@") else text


def _expand(expression: str) -> str:
    return ALIASES.get(expression, expression)


def cron_error(expression: str) -> str | None:
    """Why `expression` is not a five-field cron expression or a known alias, or None."""
    text = cron_normalise(expression)
    if not text:
        return "a recurring job needs a cron expression"
    if text.startswith("@"):
        if text not in ALIASES:
            return f"unknown alias {text!r}; use one of {', '.join(sorted(ALIASES))}"
        return None
    if len(text.split()) != 5:
        return f"must have five fields: {FIELDS} (found {len(text.split())})"
    try:
        # Any start will do: parsing happens in the constructor; the first match proves that
        # the expression can fire at all (`0 0 30 2 *` never does).
        next(CronSim(text, datetime(2000, 1, 1)))
    except CronSimError as exc:
        return f"not a valid cron expression: {str(exc).lower()}"
    except StopIteration:
        return "never fires"
    return None


def zone_error(name: str) -> str | None:
    """Why `name` is not an IANA time zone, or None."""
    if not name or name != name.strip():
        return f"unknown time zone {name!r}"
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return f"unknown time zone {name!r}"
    return None


@lru_cache(maxsize=64)
def _zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def cron_iter(expression: str, zone: str, after: datetime) -> Iterator[datetime]:
    """Fire times strictly after `after`, in UTC. The expression must be valid."""
    local = after.astimezone(_zone(zone))
    for instant in CronSim(_expand(cron_normalise(expression)), local):
        yield instant.astimezone(UTC)


@lru_cache(maxsize=4096)
def cron_next(expression: str, zone: str, after: datetime) -> datetime | None:
    """The first fire time strictly after `after` (UTC), or None if there is none. Cached: a
    dispatcher batch asks the same question for every job of the same schedule."""
    return next(cron_iter(expression, zone, after), None)


def cron_between(
    expression: str, zone: str, *, after: datetime, until: datetime, limit: int
) -> tuple[list[datetime], bool]:
    """Fire times in (after, until], oldest first, at most `limit`; and whether there were
    more than `limit` (the list is then the first `limit`)."""
    found: list[datetime] = []
    for instant in cron_iter(expression, zone, after):
        if instant > until:
            return found, False
        if len(found) == limit:
            return found, True
        found.append(instant)
    return found, False


def cron_latest(expression: str, zone: str, *, at_or_before: datetime) -> datetime | None:
    """The last fire time at or before `at_or_before` (UTC), or None."""
    local = (at_or_before + timedelta(microseconds=1)).astimezone(_zone(zone))
    for instant in CronSim(_expand(cron_normalise(expression)), local, reverse=True):
        found = instant.astimezone(UTC)
        if found <= at_or_before:
            return found
    return None


def cron_preview(
    expression: str, zone: str, *, start: datetime, count: int, until: datetime | None = None
) -> list[datetime]:
    """The next `count` fire times after `start` (and not after `until`), in the job's zone
    (what a person reads)."""
    tz = _zone(zone)
    out: list[datetime] = []
    for instant in cron_iter(expression, zone, start):
        if until is not None and instant > until:
            break
        out.append(instant.astimezone(tz))
        if len(out) >= count:
            break
    return out


def next_occurrence(job: Job, *, after: datetime) -> datetime | None:
    """The job's first occurrence strictly after `after`, within its start and end (None: none)."""
    start_floor = job.start_at - timedelta(microseconds=1) if job.start_at else None
    t = cron_next(job.cron, job.timezone, max(after, start_floor) if start_floor else after)
    if t is not None and job.end_at is not None and t > job.end_at:
        return None
    return t

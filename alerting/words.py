"""Alert texts in the words people use (issue 27): durations as "10 minutes" or "7 days", not
`0:10:00` or `7 days, 0:00:00`, counts with their noun in the right number, and the sentences
the conditions' findings share (alerting/failure_conditions.py, alerting/platform_conditions.py)."""

from __future__ import annotations

from datetime import timedelta

_UNITS = (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1))


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """ "1 run", "3 runs" (`nouns` when the plural is not noun + "s")."""
    return f"{count} {noun if count == 1 else (nouns or noun + 's')}"


def duration_words(value: timedelta) -> str:
    """The two largest non-zero units, rounded down to the second: "7 days", "1 hour 30
    minutes", "45 seconds"; "0 seconds" for nothing (or less than a second)."""
    left = max(0, int(value.total_seconds()))
    parts: list[str] = []
    for unit, seconds in _UNITS:
        amount, left = divmod(left, seconds)
        if amount:
            parts.append(plural(amount, unit))
    return " ".join(parts[:2]) or "0 seconds"


def failure_rate_words(what: str, failed: int, total: int, window: timedelta, units: str = "runs") -> str:
    """ "workflow order: 2 of 5 runs failed (40%) in 10 minutes"."""
    share = f"{failed / total * 100:.0f}%"
    return f"{what}: {failed} of {total} {units} failed ({share}) in {duration_words(window)}"


def last_runs_failed(n: int) -> str:
    """ "its last run failed", "its last 3 runs failed"."""
    if n == 1:
        return "its last run failed"
    return f"its last {n} runs failed"


def need_operator(count: int) -> str:
    """ "1 run needs an operator (Failed)", "3 runs need an operator (Failed)"."""
    if count == 1:
        return "1 run needs an operator (Failed)"
    return f"{count} runs need an operator (Failed)"

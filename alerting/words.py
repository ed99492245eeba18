"""Alert texts in the words people use (issue 27): durations as "10 minutes" or "7 days", not
`0:10:00` or `7 days, 0:00:00`, and counts with their noun in the right number."""

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

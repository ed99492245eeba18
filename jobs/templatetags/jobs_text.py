"""Template filters of the job pages.

`brief`: Django's `truncatechars`, the same text, for the long excerpts of the runs list (each
run's output, up to SAS_OUTPUT_EXCERPT_BYTES: 2 KiB). Django's walks the text character by
character in Python to skip combining marks (~50 us for a 300-character cut, twice a run on a
job page: issue 28's benchmark, bench/outputs.py); when the first `length + 1` characters are
ASCII - none of them combining, and NFC leaves them as they are - the cut is a slice.
"""

from __future__ import annotations

from typing import Any

from django import template
from django.template.defaultfilters import truncatechars
from django.utils.text import add_truncation_text, calculate_truncate_chars_length

register = template.Library()


@register.filter(is_safe=True)
def brief(value: Any, arg: Any) -> str:
    """`value|truncatechars:arg`, with a fast path for an ASCII head (tests/jobs/test_brief.py
    holds it to Django's on every kind of text)."""
    try:
        length = int(arg)
    except ValueError:  # as Django's filter: an invalid literal, nothing cut
        return str(value)
    text = str(value)
    if length <= 0 or not text[: length + 1].isascii():
        return str(truncatechars(text, length))
    if len(text) <= length:
        return text
    # Truncator.chars: `length` characters in all, the ellipsis (as translated) among them.
    return str(add_truncation_text(text[: calculate_truncate_chars_length(length, None)], None))

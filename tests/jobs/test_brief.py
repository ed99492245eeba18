"""`brief` (jobs/templatetags/jobs_text.py) is Django's `truncatechars`, character for character,
on every kind of text: ASCII, accents composed and not, combining marks around the cut, wide
characters, short texts, bad lengths."""

from __future__ import annotations

from typing import Any

import pytest
from django.template.defaultfilters import truncatechars

from jobs.templatetags.jobs_text import brief

TEXTS = [
    "",
    "ok",
    "x" * 119,
    "x" * 120,
    "x" * 121,
    '{"id": 42, "note": "' + "a" * 3000 + '"}',
    "a" * 119 + "e\u0301" + "b" * 50,  # a combining accent right after the cut
    "a" * 120 + "e\u0301" + "b" * 50,
    "a" * 118 + "\u0301" * 5 + "b" * 50,
    "é" * 200,
    "e\u0301" * 200,
    "漢字" * 100,
    "a" * 100 + "漢" * 100,
    "<script>alert(1)</script>" * 10,
    "line\nbreak\t" * 30,
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("length", [1, 2, 120, 121, 300, 0, -3, "120", "x"])
def test_brief__is_djangos_truncatechars(text: str, length: Any) -> None:
    assert brief(text, length) == truncatechars(text, length)

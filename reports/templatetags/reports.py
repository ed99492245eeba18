"""`{% load reports %}`: the run timeline, and the report's number formats.

{% run_timeline timeline %}   draws a `reports.timeline.Timeline` (any page that shows a run:
                              the order page, the admin's run page, later a job-run page)
"""

from __future__ import annotations

from typing import Any

from django import template

from ..charts import format_duration, timeline_chart
from ..timeline import Timeline

register = template.Library()


@register.inclusion_tag("reports/_timeline.html")
def run_timeline(timeline: Timeline | None, live_url: str = "") -> dict[str, Any]:
    return {"timeline": timeline, "svg": timeline_chart(timeline) if timeline else "", "live_url": live_url}


@register.filter
def duration(seconds: float | None) -> str:
    return format_duration(seconds)


@register.filter
def percent(rate: float | None) -> str:
    return "\u2014" if rate is None else f"{rate * 100:.1f}%"


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key)

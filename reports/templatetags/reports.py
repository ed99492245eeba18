"""`{% load reports %}`: the run timeline, and the report's number formats.

{% timeline_figure timeline %} draws a `reports.timeline.Timeline` (any page that shows a run:
                              the order page, the admin's run page, later a job-run page)
{% local_time moment window %} a moment on the report window's wall clock, in a <time> element
                              (`Window.text`: the one conversion the header, table and charts use)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..svg import format_duration
from ..timeline import Timeline
from ..timeline_chart import timeline_chart
from ..windows import Window

register = template.Library()


@register.inclusion_tag("reports/_timeline.html")
def timeline_figure(timeline: Timeline | None, live_url: str = "") -> dict[str, Any]:
    """A run's timeline drawn (`reports.timeline.run_timeline` builds it; `timeline_chart` draws)."""
    return {"timeline": timeline, "svg": timeline_chart(timeline) if timeline else "", "live_url": live_url}


@register.simple_tag
def local_time(moment: datetime, window: Window, weekday: bool = False) -> SafeString:
    """`moment` as the report shows it, on `window`'s wall clock: "5 Jan 17:30" (with the
    weekday, "Mon 5 Jan 17:30"), the exact moment with its offset in the element's datetime."""
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        window.local(moment).isoformat(),
        window.tz_name,
        window.text(moment, weekday=weekday),
    )


@register.filter
def duration(seconds: float | None) -> str:
    return format_duration(seconds)


@register.filter
def percent(rate: float | None) -> str:
    return "\u2014" if rate is None else f"{rate * 100:.1f}%"


@register.filter
def get(mapping: dict[str, Any], key: str) -> Any:
    return mapping.get(key)

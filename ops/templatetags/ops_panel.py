"""The admin index's engine panel: open alerts by severity (issue 21)."""

from __future__ import annotations

from django import template

from ops.selectors import alerts_open_by_severity

register = template.Library()


@register.simple_tag
def open_alerts_by_severity() -> list[dict[str, object]]:
    return [{"severity": s, "label": label, "count": n} for s, label, n in alerts_open_by_severity()]

"""How the admins show a state, a timestamp or a JSON document (CSS in admin/base_site.html)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

# In lists minutes are enough to scan; in a run's inlines the year is noise.
LIST_TIME = "%Y-%m-%d %H:%M"
INLINE_TIME = "%m-%d %H:%M:%S"
FULL_TIME = "%Y-%m-%d %H:%M:%S"


def state_badge(state: str, label: str | None = None) -> SafeString:
    """A colored pill for a run/step state or an alert severity (CSS in admin/base_site.html)."""
    return format_html('<span class="sas-badge sas-{}">{}</span>', state, label or state)


def json_block(value: Any) -> SafeString:
    """A JSON document, indented, for a detail page."""
    return format_html("<pre class='sas-json'>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


def compact_time(value: datetime | None, fmt: str = FULL_TIME) -> SafeString:
    """A timestamp in one short line (UTC, like the database), full precision on hover."""
    if value is None:
        return mark_safe('<span class="sas-muted">-</span>')
    return format_html(
        '<span class="sas-nowrap" title="{}">{}</span>', value.isoformat(), value.strftime(fmt)
    )


def time_column(field: str, description: str) -> Callable[[Any, Any], SafeString]:
    """An admin column showing the row's `field` with `compact_time`, in the admin's own
    `time_format`, sortable by the field."""

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Any) -> SafeString:
        return compact_time(getattr(obj, field), model_admin.time_format)

    return column

"""What other apps' admins take from the scheduler's: a link to a run (and the column of it that
the admins of a run's rows show), and the permission that lets a staff user operate runs."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from adminkit.readonly import ExactSearchMixin, ReadOnlyAdmin

# The permission that lets a staff user act on runs (cancel, resume compensation, reset a
# breaker). Nobody edits a run's fields; "change" is reused as "may operate".
OPERATE_PERMISSION = "scheduler.change_run"


def run_link(run_id: uuid.UUID | str | None, *, full: bool = False) -> str:
    """A link to a run's admin page, built from the id alone (no query). Short ids everywhere
    are the last 8 hex digits: ids are time-ordered UUIDs (scheduler/ids.py), whose first digits
    are the time and the same for every run of the same minute."""
    if run_id is None:
        return "-"
    url = reverse("admin:scheduler_run_change", args=[run_id])
    text = str(run_id) if full else str(run_id)[-8:]
    return format_html('<a href="{}" title="{}"><code>{}</code></a>', url, run_id, text)


class RunColumn:
    """The run column of the admin of a run's rows (steps, history, long work): a link built
    from the row's run id (no query)."""

    @admin.display(description="run", ordering="run_id")
    def run_short(self, obj: Any) -> str:
        return run_link(obj.run_id)


class RunRowsAdmin(ExactSearchMixin, RunColumn, ReadOnlyAdmin):
    """The list of one kind of a run's rows (its steps, its history): searched by exact run id,
    100 a page, newest first by primary key - it follows insertion order, so no sort over the
    table."""

    search_by_uuid: tuple[str, ...] = ("run_id",)
    ordering = ("-id",)
    list_per_page = 100

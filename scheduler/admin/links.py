"""What other apps' admins take from the scheduler's: a link to a run, and the permission that
lets a staff user operate runs."""

from __future__ import annotations

import uuid

from django.urls import reverse
from django.utils.html import format_html

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

"""The admin of the execution history (an audit log: big, append-only): its own list, and the
inline on a run's page. Both show a row's step and its error or, for an operator's row, its note."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from adminkit.display import FULL_TIME, INLINE_TIME, time_column
from adminkit.readonly import ReadOnlyInline
from scheduler.models import TaskExecutionHistory

from .links import RunRowsAdmin


def history_note(row: TaskExecutionHistory) -> str:
    """What an operator's row says beside its action: which idempotency key the step sends from
    then on, and why (issue 28, scheduler/keys.py)."""
    note = row.detail.get("note") if isinstance(row.detail, dict) else None
    return note[:300] if isinstance(note, str) else ""


class HistoryColumns:
    """The columns the history's list and its inline on a run's page share."""

    columns = ("step_name", "kind", "status", "retry_count", "worker", "error_short")
    error_width = 200
    time_format = INLINE_TIME
    started = time_column("started_at", "started")
    ended = time_column("ended_at", "ended")

    @admin.display(description="step")
    def step_name(self, obj: TaskExecutionHistory) -> str:
        # Job rows (kind "job") belong to a job occurrence, not to a step.
        return obj.step.name if obj.step is not None else "-"

    @admin.display(description="error / note")
    def error_short(self, obj: TaskExecutionHistory) -> str:
        return obj.error[: self.error_width] or history_note(obj) or "-"


class HistoryInline(HistoryColumns, ReadOnlyInline):
    model = TaskExecutionHistory
    verbose_name_plural = "execution history"
    fields = readonly_fields = ("started", "ended", *HistoryColumns.columns)

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskExecutionHistory]:
        return super().get_queryset(request).select_related("step").order_by("started_at", "id")


@admin.register(TaskExecutionHistory)
class TaskExecutionHistoryAdmin(HistoryColumns, RunRowsAdmin):
    list_display = ("id", "started", "ended", "run_short", *HistoryColumns.columns)
    list_filter = ("kind", "status")
    list_select_related = ("step",)
    search_fields = ("run__id", "worker")
    search_by_text = ("worker",)
    search_help_text = "Exact run id or worker (host:pid, or admin:<user> for operator actions)."
    raw_id_fields = ("run", "step")
    error_width = 120
    time_format = FULL_TIME

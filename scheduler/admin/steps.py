"""The admin of steps: every step of every run, filtered by name, state, kind or deadline."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from adminkit.display import FULL_TIME, state_badge, time_column
from adminkit.readonly import value_filter
from scheduler import selectors
from scheduler.models import Step

from .links import RunRowsAdmin

StepNameFilter = value_filter("step name", "name", selectors.workflow_step_names)


class StepOverdueFilter(admin.SimpleListFilter):
    title = "deadline"
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Processing past complete-by")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(pk__in=selectors.step_overdue_queryset().values("pk"))
        return queryset


class StepColumns:
    """The columns the steps' list and the steps inline on a run's page share."""

    time_format = FULL_TIME

    @admin.display(description="state", ordering="process_state")
    def state(self, obj: Step) -> SafeString:
        return state_badge(obj.process_state, obj.get_process_state_display())

    @admin.display(description="failures / max", ordering="failure_count")
    def failures(self, obj: Step) -> str:
        return f"{obj.failure_count}/{obj.max_failures}"

    complete_by_short = time_column("complete_by", "complete by")
    not_before_short = time_column("not_before", "not before")


@admin.register(Step)
class StepAdmin(StepColumns, RunRowsAdmin):
    list_display = (
        "id",
        "run_short",
        "name",
        "kind",
        "state",
        "attempts",
        "failures",
        "locked_by",
        "complete_by_short",
        "not_before_short",
    )
    list_filter = ("process_state", "kind", StepNameFilter, StepOverdueFilter)
    search_fields = ("run__id", "idempotency_key")
    search_by_text = ("idempotency_key",)
    search_help_text = "Exact run id or idempotency key (<run id>:<step name>)."
    raw_id_fields = ("run", "compensates")

"""The operator's admin of runs: the list, the filters, a run's page with its steps, events and
history inlines. Steps, the history and long work have their own admins beside this one.

Everything here is read-only: a run's state changes only through the operator's audited actions,
whose buttons, pages and changelist actions `ops/` adds (ops/operator_admin.py, issue 27). Queries live in
`scheduler/selectors.py`. Lists of big tables avoid whole-table work: per-row counts are
subqueries evaluated for the page only, filter choices come from the workflow registry (not a
DISTINCT over the table), and result counts are capped.

This admin knows the engine only. What reads other apps too - the alerts per run, the link to a
run's order, the engine-health page - is added by `ops/admin.py`, which registers the run admin
(a subclass of `RunAdmin`, which is not registered here). The shared display helpers and
read-only bases (and `actor_name`) are `adminkit/`; other apps' admins take `run_link` and
`OPERATE_PERMISSION` from here.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from adminkit.display import INLINE_TIME, LIST_TIME, compact_time, json_block, state_badge
from adminkit.readonly import ExactSearchMixin, ReadOnlyAdmin, ReadOnlyInline, value_filter
from scheduler import selectors
from scheduler.models import Run, RunEvent, Step
from scheduler.permissions import staff_may

from .history import HistoryInline
from .links import OPERATE_PERMISSION
from .steps import StepColumns

# ---------------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------------


WorkflowFilter = value_filter("workflow", "workflow", selectors.workflow_names)


class AttentionFilter(admin.SimpleListFilter):
    """What the engine alone can tell about a run; `ops/admin.py` adds "needs attention", which
    reads the supervisor's alerts."""

    title = "attention"
    parameter_name = "attention"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("stuck", "Step overdue (past complete-by)"),
            ("active", "Not finished"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value == "stuck":
            return queryset.filter(selectors.run_has_overdue_step_q())
        if value == "active":
            return queryset.exclude(state__in=Run.TERMINAL_STATES)
        return queryset


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------


class StepInline(StepColumns, ReadOnlyInline):
    model = Step
    time_format = INLINE_TIME
    verbose_name_plural = "steps (forward, then compensations)"
    fields = readonly_fields = (
        "seq",
        "step_link",
        "kind",
        "state",
        "attempts",
        "failures",
        "locked_by",
        "complete_by_short",
        "not_before_short",
        "last_error_short",
    )

    @admin.display(description="name")
    def step_link(self, obj: Step) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:scheduler_step_change", args=[obj.pk]), obj.name
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Step]:
        return super().get_queryset(request).order_by("seq")

    @admin.display(description="last error")
    def last_error_short(self, obj: Step) -> str:
        return obj.last_error[:200] or "-"


class RunEventInline(ReadOnlyInline):
    model = RunEvent
    verbose_name_plural = "event log"
    fields = readonly_fields = ("at", "type", "step_name", "data_json")

    @admin.display(description="at")
    def at(self, obj: RunEvent) -> SafeString:
        return compact_time(obj.created_at, INLINE_TIME)

    def get_queryset(self, request: HttpRequest) -> QuerySet[RunEvent]:
        return super().get_queryset(request).order_by("id")

    @admin.display(description="step")
    def step_name(self, obj: RunEvent) -> str:
        # From the event's data, not the step FK: no query per row.
        return str(obj.data.get("step") or "-")

    @admin.display(description="data")
    def data_json(self, obj: RunEvent) -> SafeString:
        data = {k: v for k, v in obj.data.items() if k != "step"}
        return (
            format_html("<code>{}</code>", json.dumps(data, sort_keys=True)[:300]) if data else mark_safe("-")
        )


# Not registered here: ops/admin.py registers the operators' run admin, a subclass that adds
# what reads other apps (alerts, the order link) - once, with no unregister (issue 20).
class RunAdmin(ExactSearchMixin, ReadOnlyAdmin):
    list_display = (
        "short_id",
        "state_badge",
        "progress",
        "created",
        "finished",
        "workflow",
        "owner",
        "prio",
        "correlation",
    )
    list_display_links = ("short_id",)
    list_filter = ("state", WorkflowFilter, AttentionFilter, ("created_at", admin.DateFieldListFilter))
    list_select_related = ("owner",)
    search_fields = ("id", "correlation_id", "owner__username")
    search_help_text = "Exact run id, correlation id (order id) or owner username."
    # A UUID is a run id or an order id (an order run's correlation id); anything else a
    # correlation id or a username.
    search_by_uuid = ("pk", "correlation_id")
    search_by_text = ("correlation_id", "owner__username")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    list_per_page = 50
    inlines = (StepInline, RunEventInline, HistoryInline)
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "state_full",
                    "workflow",
                    "owner",
                    "priority",
                    "deadline",
                    "correlation_detail",
                    "cancel_requested",
                    "error",
                )
            },
        ),
        ("Progress", {"fields": ("progress", "long_progress", "history_link")}),
        ("Input", {"fields": ("input_json",)}),
        ("Timing (UTC)", {"fields": ("created_precise", "updated_precise", "finished_precise")}),
    )
    readonly_fields = flatten_fieldsets(fieldsets)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return selectors.run_list_annotated(queryset=super().get_queryset(request))

    # -- permissions: operating a run is not editing it -----------------------------------------

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return staff_may(request.user, OPERATE_PERMISSION)

    # -- columns ---------------------------------------------------------------------------------

    @admin.display(description="run", ordering="id")
    def short_id(self, obj: Run) -> SafeString:
        return format_html('<code title="{}">{}</code>', obj.id, str(obj.id)[-8:])

    @admin.display(description="state", ordering="state")
    def state_badge(self, obj: Run) -> SafeString:
        # The short word in lists; the full label ("Failed (needs operator)") on hover and on the
        # detail page.
        return format_html(
            '<span class="sas-badge sas-{}" title="{}">{}</span>',
            obj.state,
            obj.get_state_display(),
            obj.state.title(),
        )

    @admin.display(description="state")
    def state_full(self, obj: Run) -> SafeString:
        return state_badge(obj.state, obj.get_state_display())

    @admin.display(description="created")
    def created_precise(self, obj: Run) -> SafeString:
        return compact_time(obj.created_at, "%Y-%m-%d %H:%M:%S.%f")

    @admin.display(description="updated")
    def updated_precise(self, obj: Run) -> SafeString:
        return compact_time(obj.updated_at, "%Y-%m-%d %H:%M:%S.%f")

    @admin.display(description="finished")
    def finished_precise(self, obj: Run) -> SafeString:
        return compact_time(obj.finished_at, "%Y-%m-%d %H:%M:%S.%f")

    @admin.display(description="correlation id", ordering="correlation_id")
    def correlation(self, obj: Run) -> SafeString:
        value = obj.correlation_id
        if not value:
            return mark_safe("-")
        short = value if len(value) <= 13 else "\u2026" + value[-8:]
        return format_html('<code title="{}">{}</code>', value, short)

    @admin.display(description="correlation id")
    def correlation_detail(self, obj: Run) -> SafeString:
        return format_html("<code>{}</code>", obj.correlation_id or "-")

    @admin.display(description="prio", ordering="priority")
    def prio(self, obj: Run) -> int:
        return obj.priority

    @admin.display(description="created", ordering="created_at")
    def created(self, obj: Run) -> SafeString:
        return compact_time(obj.created_at, LIST_TIME)

    @admin.display(description="finished", ordering="finished_at")
    def finished(self, obj: Run) -> SafeString:
        return compact_time(obj.finished_at, LIST_TIME)

    @admin.display(description="steps")
    def progress(self, obj: Run) -> SafeString:
        done = getattr(obj, "steps_done", None)
        total = getattr(obj, "steps_total", None)
        if done is None or total is None:
            return mark_safe("-")
        css = "sas-progress-done" if total and done == total else "sas-progress"
        return format_html('<span class="{}">{}/{}</span>', css, done, total)

    @admin.display(description="pages / heartbeat")
    def long_progress(self, obj: Run) -> SafeString:
        """A paginated run's pages, rows, speed and time left as a bar; a heartbeat step's
        HeartbeatStatus (in progress / completed, last heartbeat). "-" for other runs."""
        return long_progress_html(selectors.run_progress_of(obj))

    @admin.display(description="execution history")
    def history_link(self, obj: Run) -> SafeString:
        url = reverse("admin:scheduler_taskexecutionhistory_changelist") + f"?run__id__exact={obj.id}"
        return format_html('<a href="{}">All attempts and decisions of this run</a>', url)

    @admin.display(description="input")
    def input_json(self, obj: Run) -> SafeString:
        return json_block(obj.input)


# ---------------------------------------------------------------------------------------------
# Long steps on a run's page: paginated steps' progress, heartbeat steps' statuses
# ---------------------------------------------------------------------------------------------


def long_progress_html(progress: dict[str, Any]) -> SafeString:
    """The run page's "pages / heartbeat" field, from `selectors.run_progress_of`."""
    parts: list[SafeString] = []
    paged = progress.get("paged")
    if paged:
        rate = paged["rows_per_second"]
        eta = paged["eta_seconds"]
        parts.append(
            format_html(
                '<div class="sas-long-progress" id="sas-long-progress" data-percent="{}">'
                '<progress class="sas-progress-bar" max="100" value="{}"></progress> '
                "<strong>{} %</strong> &middot; pages {} of {} &middot; rows {} of {} &middot; {} rows/s"
                " &middot; time left {}</div>",
                paged["percent"],
                paged["percent"],
                paged["percent"],
                paged["pages_done"],
                paged["pages_total"] if paged["pages_total"] is not None else "?",
                paged["rows_done"],
                paged["rows_total"] if paged["rows_total"] is not None else "?",
                "-" if rate is None else rate,
                "-" if eta is None else f"{eta} s",
            )
        )
    for hb in progress.get("heartbeats") or []:
        since = hb["seconds_since_heartbeat"]
        parts.append(
            format_html(
                '<div class="sas-heartbeat">{}: {} &middot; {} heartbeat(s) this attempt'
                " &middot; last {}{}</div>",
                hb["step"],
                state_badge(hb["status"], hb["status_label"]),
                hb["heartbeats"],
                hb["last_heartbeat_at"] or "never",
                f" ({since} s ago)" if since is not None else "",
            )
        )
    return format_html_join_safe(parts)


def format_html_join_safe(parts: list[SafeString]) -> SafeString:
    if not parts:
        return mark_safe("-")
    return mark_safe("".join(parts))  # noqa: S308 - each part was built by format_html


# The Job admin (editable through the job services, with pause / resume / run now) is the jobs
# app's: jobs/admin.py.

"""The operator's admin for the scheduler's models: runs, steps, jobs and the execution history.

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
import uuid
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from adminkit.display import INLINE_TIME, LIST_TIME, compact_time, json_block, state_badge
from adminkit.readonly import ReadOnlyAdmin, ReadOnlyInline, parse_uuid
from scheduler import selectors
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.permissions import staff_may

# The permission that lets a staff user act on runs (cancel, resume compensation, reset a
# breaker). Nobody edits a run's fields; "change" is reused as "may operate".
OPERATE_PERMISSION = "scheduler.change_run"


# ---------------------------------------------------------------------------------------------
# What other apps' admins use: a link to a run, and the name of an operator in the history
# ---------------------------------------------------------------------------------------------


def run_link(run_id: uuid.UUID | str | None, *, full: bool = False) -> str:
    """A link to a run's admin page, built from the id alone (no query). Short ids everywhere
    are the last 8 hex digits: ids are time-ordered UUIDs (scheduler/ids.py), whose first digits
    are the time and the same for every run of the same minute."""
    if run_id is None:
        return "-"
    url = reverse("admin:scheduler_run_change", args=[run_id])
    text = str(run_id) if full else str(run_id)[-8:]
    return format_html('<a href="{}" title="{}"><code>{}</code></a>', url, run_id, text)


# ---------------------------------------------------------------------------------------------
# Filters
# ---------------------------------------------------------------------------------------------


class WorkflowFilter(admin.SimpleListFilter):
    title = "workflow"
    parameter_name = "workflow"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in selectors.workflow_names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(workflow=value) if value else queryset


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


class StepNameFilter(admin.SimpleListFilter):
    title = "step name"
    parameter_name = "name"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in selectors.workflow_step_names()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(name=value) if value else queryset


class StepOverdueFilter(admin.SimpleListFilter):
    title = "deadline"
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "Processing past complete-by")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "yes":
            return queryset.filter(pk__in=selectors.step_overdue_queryset().values("pk"))
        return queryset


# ---------------------------------------------------------------------------------------------
# Run
# ---------------------------------------------------------------------------------------------


class StepInline(ReadOnlyInline):
    model = Step
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

    @admin.display(description="complete by")
    def complete_by_short(self, obj: Step) -> SafeString:
        return compact_time(obj.complete_by, INLINE_TIME)

    @admin.display(description="not before")
    def not_before_short(self, obj: Step) -> SafeString:
        return compact_time(obj.not_before, INLINE_TIME)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Step]:
        return super().get_queryset(request).order_by("seq")

    @admin.display(description="state")
    def state(self, obj: Step) -> SafeString:
        return state_badge(obj.process_state, obj.get_process_state_display())

    @admin.display(description="failures / max")
    def failures(self, obj: Step) -> str:
        return f"{obj.failure_count}/{obj.max_failures}"

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


def history_note(row: TaskExecutionHistory) -> str:
    """What an operator's row says beside its action: which idempotency key the step sends from
    then on, and why (issue 28, scheduler/keys.py)."""
    note = row.detail.get("note") if isinstance(row.detail, dict) else None
    return note[:300] if isinstance(note, str) else ""


class HistoryInline(ReadOnlyInline):
    model = TaskExecutionHistory
    verbose_name_plural = "execution history"
    fields = readonly_fields = (
        "started",
        "ended",
        "step_name",
        "kind",
        "status",
        "retry_count",
        "worker",
        "error_short",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[TaskExecutionHistory]:
        return super().get_queryset(request).select_related("step").order_by("started_at", "id")

    @admin.display(description="step")
    def step_name(self, obj: TaskExecutionHistory) -> str:
        # Job rows (kind "job") belong to a job occurrence, not to a step.
        return obj.step.name if obj.step is not None else "-"

    @admin.display(description="started")
    def started(self, obj: TaskExecutionHistory) -> SafeString:
        return compact_time(obj.started_at, INLINE_TIME)

    @admin.display(description="ended")
    def ended(self, obj: TaskExecutionHistory) -> SafeString:
        return compact_time(obj.ended_at, INLINE_TIME)

    @admin.display(description="error / note")
    def error_short(self, obj: TaskExecutionHistory) -> str:
        return obj.error[:200] or history_note(obj) or "-"


# Not registered here: ops/admin.py registers the operators' run admin, a subclass that adds
# what reads other apps (alerts, the order link) - once, with no unregister (issue 20).
class RunAdmin(ReadOnlyAdmin):
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
    readonly_fields = (
        "id",
        "state_full",
        "workflow",
        "owner",
        "priority",
        "deadline",
        "correlation_detail",
        "cancel_requested",
        "error",
        "progress",
        "long_progress",
        "history_link",
        "input_json",
        "created_precise",
        "updated_precise",
        "finished_precise",
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        return selectors.run_list_annotated(queryset=super().get_queryset(request))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        """Exact matches only, so each is an index lookup: a UUID is a run id or an order id;
        anything else a correlation id or a username."""
        term = search_term.strip()
        if not term:
            return queryset, False
        parsed = parse_uuid(term)
        if parsed is not None:
            return queryset.filter(Q(pk=parsed) | Q(correlation_id=str(parsed))), False
        return queryset.filter(Q(correlation_id=term) | Q(owner__username=term)), False

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
# Step
# ---------------------------------------------------------------------------------------------


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
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
    search_help_text = "Exact run id or idempotency key (<run id>:<step name>)."
    raw_id_fields = ("run", "compensates")
    ordering = ("-id",)
    list_per_page = 100

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Step], search_term: str
    ) -> tuple[QuerySet[Step], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        parsed = parse_uuid(term)
        if parsed is not None:
            return queryset.filter(run_id=parsed), False
        return queryset.filter(idempotency_key=term), False

    @admin.display(description="run", ordering="run_id")
    def run_short(self, obj: Step) -> str:
        return run_link(obj.run_id)

    @admin.display(description="state", ordering="process_state")
    def state(self, obj: Step) -> SafeString:
        return state_badge(obj.process_state, obj.get_process_state_display())

    @admin.display(description="failures / max", ordering="failure_count")
    def failures(self, obj: Step) -> str:
        return f"{obj.failure_count}/{obj.max_failures}"

    @admin.display(description="complete by", ordering="complete_by")
    def complete_by_short(self, obj: Step) -> SafeString:
        return compact_time(obj.complete_by)

    @admin.display(description="not before", ordering="not_before")
    def not_before_short(self, obj: Step) -> SafeString:
        return compact_time(obj.not_before)


# ---------------------------------------------------------------------------------------------
# Execution history (an audit log: big, append-only)
# ---------------------------------------------------------------------------------------------


@admin.register(TaskExecutionHistory)
class TaskExecutionHistoryAdmin(ReadOnlyAdmin):
    list_display = (
        "id",
        "started",
        "ended",
        "run_short",
        "step_name",
        "kind",
        "status",
        "retry_count",
        "worker",
        "error_short",
    )
    list_filter = ("kind", "status")
    list_select_related = ("step",)
    search_fields = ("run__id", "worker")
    search_help_text = "Exact run id or worker (host:pid, or admin:<user> for operator actions)."
    raw_id_fields = ("run", "step")
    # The primary key follows insertion order: newest first without a sort over the table.
    ordering = ("-id",)
    list_per_page = 100

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[TaskExecutionHistory], search_term: str
    ) -> tuple[QuerySet[TaskExecutionHistory], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        parsed = parse_uuid(term)
        if parsed is not None:
            return queryset.filter(run_id=parsed), False
        return queryset.filter(worker=term), False

    @admin.display(description="run", ordering="run_id")
    def run_short(self, obj: TaskExecutionHistory) -> str:
        return run_link(obj.run_id)

    @admin.display(description="started", ordering="started_at")
    def started(self, obj: TaskExecutionHistory) -> SafeString:
        return compact_time(obj.started_at)

    @admin.display(description="ended", ordering="ended_at")
    def ended(self, obj: TaskExecutionHistory) -> SafeString:
        return compact_time(obj.ended_at)

    @admin.display(description="step")
    def step_name(self, obj: TaskExecutionHistory) -> str:
        # Job rows (kind "job") belong to a job occurrence, not to a step.
        return obj.step.name if obj.step is not None else "-"

    @admin.display(description="error / note")
    def error_short(self, obj: TaskExecutionHistory) -> str:
        return obj.error[:120] or history_note(obj) or "-"


# ---------------------------------------------------------------------------------------------
# Long steps: checkpoints of paginated steps, HeartbeatStatus rows of heartbeat steps
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

"""The operators' Job admin: find jobs, create and edit them, pause, resume and run them now.

Every write is a job service call (`scheduler/jobs.md`), never a model save: the add and change
forms are the pages' `JobForm`, whose validation ends in `job_create` / `job_update` (inside the
admin's transaction), so a refused form shows the service's field errors and writes nothing.
Pause, resume and run now are changelist actions and buttons on the job's page; each asks on a
confirmation page first (pause takes a note there), calls the service once per job, and writes
an admin LogEntry (the job's "History"), beside the engine's own history row with the actor.
Delete goes through `job_delete` too (its runs stay, unlinked).

Staff get staff-only work here (every workflow and `task:*`, marked "staff only"), for staff
owners: the services are told the person acting is staff (`by_staff`) and check the owner.

The job's next occurrences (`ScheduledJob`) and latest history rows are shown on its page, with
links to all its runs and its whole history in the scheduler's admins. The dispatcher's interval
is the periodic task "sas: jobs dispatcher", edited in django-celery-beat's own admin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.forms import ModelChoiceField
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from adminkit.actors import actor_name
from adminkit.changelist import BoundedChangeListMixin
from adminkit.display import INLINE_TIME, LIST_TIME, compact_time, json_block, state_badge
from scheduler.admin import WorkflowFilter, run_link
from scheduler.dispatcher.selectors import job_history, job_schedule_text, job_scheduled
from scheduler.limits import (
    CUSTOMER_PRIORITY_MAX,
    CUSTOMER_PRIORITY_MIN,
    STAFF_PRIORITY_MAX,
    STAFF_PRIORITY_MIN,
    SYSTEM_PRIORITY,
    LimitExceeded,
)
from scheduler.models import HELD, Job
from scheduler.permissions import staff_may
from scheduler.services.jobs import JobStateError, job_delete, job_pause, job_resume, job_run_now
from scheduler.workflows import WorkflowInputError

from .forms import JOB_FIELDS, JOB_OVERLAPS, JOB_WHAT, JOB_WHEN, JobForm, job_write
from .presenters import FINISHED, PAUSED, STATE_LABELS, job_state, reason_text
from .selectors import job_admin_list

SHOWN_ROWS = 20
# A job's page, read-only: its state, and what it will run and has run.
STATE_FIELDS = (
    "owner",
    "state_full",
    "schedule",
    "firings",
    "paused_note",
    "paused_at",
    "finished_at",
    "created_at",
    "updated_at",
)
SHOWN_FIELDS = ("scheduled_rows", "history_rows", "runs")
ACTION_NAMES = {"pause": "pause_jobs", "resume": "resume_jobs", "run_now": "run_jobs_now"}


def _due_text(due: Any) -> str:
    """A scheduled row's due time: parked (waits for its job's run, or its resume), held (its
    owner or workflow paused by an operator: scheduler/holds.md), or the time."""
    if due is None:
        return "parked"
    if due >= HELD:
        return "held (paused)"
    return compact_time(due)


def _rows_table(headers: tuple[str, ...], rows: list[tuple[Any, ...]], *, empty: str) -> SafeString:
    """A small table of rows for a job's page (values escaped; SafeStrings kept)."""
    if not rows:
        return format_html('<span class="sas-muted">{}</span>', empty)
    head = format_html_join("", "<th>{}</th>", ((h,) for h in headers))
    body = format_html_join(
        "", "<tr>{}</tr>", ((format_html_join("", "<td>{}</td>", ((v,) for v in row)),) for row in rows)
    )
    table = '<table class="sas-rows"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>'
    return format_html(table, head, body)


def _why(row: Any) -> str:
    """A history row's reason in words, and its error."""
    parts = (reason_text(str((row.detail or {}).get("reason") or "")), row.error[:200])
    return " ".join(p for p in parts if p) or "-"


class JobAdminForm(JobForm):
    """The pages' job form plus its owner (on add), saved by the job service as it validates."""

    saved: Job | None = None

    class Meta(JobForm.Meta):
        fields = ("owner", *JOB_FIELDS)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["priority"].help_text = (
            f"Higher runs first. Staff: {STAFF_PRIORITY_MIN} to {STAFF_PRIORITY_MAX}; customers choose "
            f"{CUSTOMER_PRIORITY_MIN} to {CUSTOMER_PRIORITY_MAX}, below system work (orders, exports: "
            f"{SYSTEM_PRIORITY}; webhook deliveries: -1)."
        )

    def _post_clean(self) -> None:
        if self.errors:
            return
        owner = self.cleaned_data.get("owner") if "owner" in self.fields else None
        self.saved = job_write(self, owner_id=owner.pk if owner is not None else None)


class OperationConfirm:
    """What a confirmation page says for one operation."""

    def __init__(
        self,
        *,
        title: str,
        verb: str,
        call: Callable[..., Any],
        allowed: Callable[[Job], bool],
        note: bool,
        makes_runs: bool = False,
    ) -> None:
        self.title, self.verb, self.call, self.allowed, self.note = title, verb, call, allowed, note
        # It makes runs: the service is told whether the person acting is staff (`by_staff`).
        self.makes_runs = makes_runs


OPERATIONS = {
    "pause": OperationConfirm(
        title="Pause jobs",
        verb="Paused",
        call=job_pause,
        allowed=lambda job: job.enabled,
        note=True,
    ),
    "resume": OperationConfirm(
        title="Resume jobs",
        verb="Resumed",
        call=job_resume,
        allowed=lambda job: not job.enabled,
        note=False,
    ),
    "run_now": OperationConfirm(
        title="Run jobs now",
        verb="Ran now",
        call=job_run_now,
        # An explicit request: a paused job runs too (its schedule stays paused).
        allowed=lambda job: True,
        note=False,
        makes_runs=True,
    ),
}


@admin.register(Job)
class JobAdmin(BoundedChangeListMixin, admin.ModelAdmin):
    form = JobAdminForm
    change_form_template = "admin/jobs/job_change_form.html"
    list_display = (
        "name",
        "owner",
        "workflow",
        "schedule",
        "state",
        "next_run",
        "last_run",
        "overlap_policy",
        "runs",
    )
    list_filter = (
        ("owner", admin.RelatedOnlyFieldListFilter),
        "enabled",
        WorkflowFilter,
        "overlap_policy",
        "is_recurring",
    )
    list_select_related = ("owner",)
    search_fields = ("=name", "=owner__username")
    search_help_text = "Exact job name or owner username."
    ordering = ("-created_at",)
    list_per_page = 50
    show_facets = admin.ShowFacets.NEVER
    raw_id_fields = ("owner",)
    actions = ("pause_jobs", "resume_jobs", "run_jobs_now")

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        what = JOB_WHAT if obj is not None else ("owner", *JOB_WHAT)
        sets: list[Any] = [
            (None, {"fields": what}),
            ("When", {"fields": ("kind", *JOB_WHEN)}),
            ("Waits for (issue 30)", {"fields": ("parents",)}),
            ("Overlaps and failures", {"fields": JOB_OVERLAPS}),
        ]
        if obj is not None:
            sets.insert(1, ("State", {"fields": STATE_FIELDS}))
            sets.append(("Next occurrences and history", {"fields": SHOWN_FIELDS}))
        return sets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [] if obj is None else [*STATE_FIELDS, *SHOWN_FIELDS]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        # A class made for this request (modelform_factory): who saves, for the job's history,
        # and whether they may do staff work (what the form offers and the services allow).
        cast(type[JobAdminForm], form).actor = actor_name(request.user)
        cast(type[JobAdminForm], form).staff = staff_may(request.user)
        if obj is None and "owner" in form.base_fields:
            owner = form.base_fields["owner"]
            assert isinstance(owner, ModelChoiceField)
            owner.queryset = get_user_model().objects.filter(is_active=True)
            owner.help_text = "The user the job belongs to (its runs are theirs)."
        return form

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return job_admin_list(queryset=super().get_queryset(request))

    # -- saving through the services -------------------------------------------------------------

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        # The form's validation saved it through the service (JobAdminForm._post_clean).
        assert form.saved is not None
        return form.saved

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        """Already written by `job_create` / `job_update`."""

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        """No related rows are edited here."""

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> list[dict[str, Any]]:
        if add:
            return [{"added": {}}]
        changed = sorted(getattr(form, "changes", {}) or form.changed_data)
        return [{"changed": {"fields": changed}}] if changed else []

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, set[str], Any]:
        """The confirmation lists what goes (scheduled rows, history); `job_delete` removes them,
        so the read-only history admin's "no delete" does not stand in the way."""
        deleted, counts, _perms_needed, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        job_delete(job_id=obj.pk, actor=actor_name(request.user))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        for job_id in queryset.order_by().values_list("pk", flat=True):
            try:
                job_delete(job_id=job_id, actor=actor_name(request.user))
            except Job.DoesNotExist:
                continue

    # -- columns ---------------------------------------------------------------------------------

    @admin.display(description="schedule")
    def schedule(self, obj: Job) -> SafeString:
        if obj.cron:
            return format_html(
                '<span title="{} ({})">{}</span>', obj.cron, obj.timezone, job_schedule_text(obj)
            )
        return format_html("{}", job_schedule_text(obj))

    @admin.display(description="scheduled runs so far")
    def firings(self, obj: Job) -> str:
        # Counted toward max firings only (the dispatcher keeps no count for a job without one).
        if obj.max_firings is None:
            return "no limit (not counted)"
        return f"{obj.firing_count} of {obj.max_firings}"

    @admin.display(description="state", ordering="enabled")
    def state(self, obj: Job) -> SafeString:
        value = job_state(obj)
        css = {PAUSED: "compensating", FINISHED: "cancelled"}.get(value, "completed")
        badge = format_html('<span class="sas-badge sas-{}">{}</span>', css, STATE_LABELS[value])
        if obj.paused_note:
            return format_html('<span title="{}">{}</span>', obj.paused_note, badge)
        return badge

    @admin.display(description="state")
    def state_full(self, obj: Job) -> SafeString:
        return self.state(obj)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Job) -> SafeString:
        return compact_time(getattr(obj, "next_run_at", None), LIST_TIME)

    @admin.display(description="last run")
    def last_run(self, obj: Job) -> SafeString:
        state = getattr(obj, "last_run_state", None)
        if state is None:
            return mark_safe('<span class="sas-muted">-</span>')
        return format_html(
            "{} {}",
            state_badge(state, state.title()),
            compact_time(getattr(obj, "last_run_at", None), LIST_TIME),
        )

    @admin.display(description="runs")
    def runs(self, obj: Job) -> SafeString:
        runs = reverse("admin:scheduler_run_changelist") + f"?job__id__exact={obj.pk}"
        history = reverse("admin:scheduler_taskexecutionhistory_changelist") + f"?job__id__exact={obj.pk}"
        return format_html('<a href="{}">runs</a> · <a href="{}">history</a>', runs, history)

    @admin.display(description="input")
    def input_json(self, obj: Job) -> SafeString:
        return json_block(obj.input)

    @admin.display(description=f"scheduled (first {SHOWN_ROWS})")
    def scheduled_rows(self, obj: Job) -> SafeString:
        rows = job_scheduled(owner_id=obj.owner_id, job_id=obj.pk)[:SHOWN_ROWS]
        return _rows_table(
            ("kind", "reason", "occurrence", "attempt", "due"),
            [
                (
                    row.get_kind_display(),
                    row.reason,
                    compact_time(row.scheduled_for),
                    row.attempt,
                    _due_text(row.next_execution_at),
                )
                for row in rows
            ],
            empty="nothing scheduled",
        )

    @admin.display(description=f"history (latest {SHOWN_ROWS})")
    def history_rows(self, obj: Job) -> SafeString:
        rows = job_history(owner_id=obj.owner_id, job_id=obj.pk)[:SHOWN_ROWS]
        return _rows_table(
            ("at", "occurrence", "status", "retry", "run", "worker", "why / error"),
            [
                (
                    compact_time(row.started_at, INLINE_TIME),
                    compact_time(row.scheduled_for, INLINE_TIME),
                    row.get_status_display(),
                    row.retry_count,
                    run_link(row.run_id),
                    row.worker or "-",
                    _why(row),
                )
                for row in rows
            ],
            empty="no history yet",
        )

    # -- pause, resume, run now: a confirmation page, then one service call per job ---------------

    @admin.action(description="Pause selected jobs…", permissions=["change"])
    def pause_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._confirm_or_operate(request, queryset, "pause")

    @admin.action(description="Resume selected jobs…", permissions=["change"])
    def resume_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._confirm_or_operate(request, queryset, "resume")

    @admin.action(description="Run selected jobs now…", permissions=["change"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        return self._confirm_or_operate(request, queryset, "run_now")

    def _confirm_or_operate(
        self, request: HttpRequest, queryset: QuerySet[Job], operation: str
    ) -> HttpResponse | None:
        if request.POST.get("confirmed") != "yes":
            return self._confirmation_page(request, list(queryset.order_by("name")), operation, action=True)
        self._operate(request, queryset.order_by("name"), operation)
        return None  # back to the changelist, with the messages

    def _confirmation_page(
        self, request: HttpRequest, jobs: list[Job], operation: str, *, action: bool
    ) -> TemplateResponse:
        spec = OPERATIONS[operation]
        context = {
            **self.admin_site.each_context(request),
            "title": spec.title,
            "opts": self.opts,
            "operation": operation,
            "spec": spec,
            "jobs": [(job, spec.allowed(job), job_schedule_text(job)) for job in jobs],
            # Posted back to the changelist as the same action, or to this job's operate URL.
            "action": ACTION_NAMES[operation] if action else "",
            "selected_name": ACTION_CHECKBOX_NAME,
            "note": request.POST.get("note", ""),
        }
        return TemplateResponse(request, "admin/jobs/confirm_operation.html", context)

    def _operate(self, request: HttpRequest, jobs: Iterable[Job], operation: str) -> None:
        """One service call per job (each its own transaction); every outcome reported, and an
        admin LogEntry for each job acted on."""
        spec = OPERATIONS[operation]
        note = request.POST.get("note", "").strip()[:2000]
        done: list[str] = []
        for job in jobs:
            kwargs: dict[str, Any] = {"job_id": job.pk, "actor": actor_name(request.user)}
            if spec.note:
                kwargs["note"] = note
            if spec.makes_runs:
                kwargs["by_staff"] = staff_may(request.user)
            try:
                result = spec.call(**kwargs)
            except (JobStateError, LimitExceeded, Job.DoesNotExist) as exc:
                self.message_user(request, f"Job “{job.name}”: {exc}", messages.ERROR)
                continue
            except WorkflowInputError as exc:  # staff-only work for an owner who is not staff
                self.message_user(
                    request,
                    f"Job “{job.name}”: {'; '.join(exc.errors.get('workflow', [str(exc)]))}",
                    messages.ERROR,
                )
                continue
            outcome = ""
            if operation == "run_now":
                why = f" ({result.reason})" if result.outcome != "started" and result.reason else ""
                outcome = f": {result.outcome}{why}"
            message = f"{spec.verb} (admin){outcome}" + (f"; note: {note}" if spec.note and note else "")
            self.log_change(request, job, message)
            done.append(f"“{job.name}”{outcome}")
        if done:
            self.message_user(request, f"{spec.verb} {len(done)} job(s): {', '.join(done)}", messages.SUCCESS)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        extra = [
            path(
                "<int:object_id>/operate/<str:operation>/",
                wrap(self.operate_view),
                name="scheduler_job_operate",
            )
        ]
        return extra + super().get_urls()

    def operate_view(self, request: HttpRequest, object_id: int, operation: str) -> HttpResponse:
        """The buttons on a job's page: GET asks, POST (confirmed) acts."""
        if operation not in OPERATIONS or not self.has_change_permission(request):
            raise PermissionDenied
        job = get_object_or_404(Job, pk=object_id)
        if request.method == "POST" and request.POST.get("confirmed") == "yes":
            self._operate(request, [job], operation)
            return HttpResponseRedirect(reverse("admin:scheduler_job_change", args=[job.pk]))
        return self._confirmation_page(request, [job], operation, action=False)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        job = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if job is not None:
            context["can_operate"] = self.has_change_permission(request, job)
            context["job_paused"] = not job.enabled
        return super().change_view(request, object_id, form_url, extra_context=context)

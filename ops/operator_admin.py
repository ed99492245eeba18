"""The operator's tools in the admin (issue 21): a confirmation page per action, with a reason
field and the row as it was shown (its `updated_at`, carried in the form: a row changed since
refuses the action as stale); the bulk resubmission with its dry run; the dry run of the next
supervisor sweep; a breaker opened or closed by hand.

Each action needs its own permission (`supervisor.OperatorAction.Meta.permissions`), checked on
the page (GET) and again on the action (POST): a read-only user gets 403 either way, and nothing
is written. The services are `supervisor/operator.py` and `ops/services.py`; this module only
reads forms, calls them and says what happened.

Mixed into `OperatorRunAdmin` (ops/admin.py): the URLs live under /admin/scheduler/run/.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from agents.breaker import CLOSED, OPEN
from scheduler.admin import OPERATE_PERMISSION
from scheduler.keys import step_key_choice
from scheduler.models import Run, Step
from scheduler.permissions import staff_may
from scheduler.workflows import step_label_of
from supervisor import operator
from supervisor.models import OperatorAction
from supervisor.operator import BULK_LIMIT, OperatorRefused
from supervisor.services import step_expire_preview

from .roles import permission_missing_words
from .selectors import breaker_is_known, breaker_statuses
from .services import BREAKER_HOLD_MAX_MINUTES, BREAKER_HOLD_MIN_MINUTES, breaker_operate

P_RESUBMIT = "supervisor.resubmit_step"
P_COMPENSATE = "supervisor.compensate_run"
P_RETRY_COMPENSATION = "supervisor.retry_compensation"
P_MARK_DONE = "supervisor.mark_compensation_done"
P_BREAKER = "supervisor.operate_breaker"
P_BULK = "supervisor.bulk_resubmit"
P_SWEEP_PREVIEW = "supervisor.view_sweep_preview"
# Cancel, resume and give up: "may operate" runs (scheduler/admin/runs.py's OPERATE_PERMISSION).
P_OPERATE = OPERATE_PERMISSION


@dataclass(frozen=True)
class RunAction:
    """One action on a run or one of its steps: its permission, whether it acts on a step, the
    confirmation page's title and what it says will happen."""

    permission: str
    on_step: bool
    title: str
    explains: str


RUN_ACTIONS: dict[str, RunAction] = {
    "resubmit_step": RunAction(
        P_RESUBMIT,
        True,
        "Resubmit a step in Error",
        "The step goes back to Pending with its failure count reset; the run goes back to "
        "Compensating. Its idempotency key is shown below: a new one if the remote refused the "
        "last one (nothing happened, and the remote would replay its refusal for that key), the "
        "same one otherwise (the remote deduplicates whatever may have happened).",
    ),
    "resubmit_run": RunAction(
        P_RESUBMIT,
        False,
        "New run of the same input",
        "The run was compensated. A new run of its input (edit it below if the input was the cause) "
        "starts, linked to this one; both run pages show the link. The input is checked like a new "
        "submission.",
    ),
    "compensate": RunAction(
        P_COMPENSATE,
        False,
        "Compensate the run on purpose",
        "Steps not started are dropped, the one in flight is stopped, and the steps done are undone "
        "in reverse order. The run ends Compensated.",
    ),
    "retry_compensation": RunAction(
        P_RETRY_COMPENSATION,
        True,
        "Retry a failing compensation now",
        "The compensation step is waiting out its backoff after failures. It becomes due now, with "
        "its failure count reset. Fix the cause first.",
    ),
    "mark_done": RunAction(
        P_MARK_DONE,
        True,
        "Mark a compensation done by hand",
        "The engine will not call this compensation again: the run goes on as if it had succeeded "
        "(the next compensation, or Compensated). Say how it was undone.",
    ),
    "cancel": RunAction(
        P_OPERATE,
        False,
        "Cancel the run",
        "Steps not started are dropped, the one in flight is stopped, and the steps done are undone "
        "in reverse order. The run ends Cancelled.",
    ),
    "resume": RunAction(
        P_OPERATE,
        False,
        "Resume compensation",
        "The run's compensation steps in Error go back to Pending with a fresh failure budget and "
        "the run back to Compensating; each sends the idempotency key shown below (a new one "
        "where the remote refused the last one). Fix the cause first.",
    ),
    "give_up": RunAction(
        P_OPERATE,
        False,
        "Give the run up",
        "The engine stops compensating: the run ends Failed with your reason and nothing more is "
        "undone. Say what is left and who handles it.",
    ),
}

# A forward step's resubmission (in place, before anything was undone) says what else changes.
FORWARD_RESUBMIT_EXPLAINS = (
    "The step goes back to Pending with its failure count reset, with the idempotency key shown "
    "below (a new one if the remote refused the last one, else the same one, which the remote "
    "deduplicates by). Nothing has been undone yet: the run's compensation is "
    "called off and the run goes on from this step. To change the input, let the run be compensated "
    "and start a new run of it instead: a changed request needs new idempotency keys."
)

# The run-level actions that are also changelist actions (several runs at once, one
# confirmation page with one reason): action -> its service.
RUN_SERVICES: dict[str, Callable[..., OperatorAction]] = {
    "cancel": operator.run_cancel_by_operator,
    "resume": operator.run_resume_compensation_by_operator,
    "give_up": operator.run_give_up_by_operator,
    "compensate": operator.run_compensate_by_operator,
}


def _has(request: HttpRequest, permission: str) -> bool:
    return staff_may(request.user, permission)


def _require(request: HttpRequest, permission: str) -> None:
    """403 unless this user holds `permission`; the page says which role gives it (issue 28)."""
    if not _has(request, permission):
        raise PermissionDenied(permission_missing_words(permission))


def _operator(request: HttpRequest) -> AbstractBaseUser:
    """The acting staff user (the admin's login is checked before any view here runs)."""
    if not request.user.is_authenticated:
        raise PermissionDenied
    return cast(AbstractBaseUser, request.user)


def _iso(moment: datetime) -> str:
    return moment.isoformat()


def _seen_of(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        # A form without the row's version cannot prove it is not stale.
        return datetime(1970, 1, 1, tzinfo=UTC)


def _seen(request: HttpRequest) -> datetime:
    return _seen_of(request.POST.get("seen", ""))


class BulkForm(forms.Form):
    match = forms.CharField(
        max_length=500,
        label="Error contains",
        help_text="Part of the steps' last error, e.g. 'payment service unavailable' (case-insensitive).",
    )
    since = forms.DateTimeField(label="Failed from (UTC)", help_text="YYYY-MM-DD HH:MM")
    until = forms.DateTimeField(label="Failed until (UTC)", help_text="YYYY-MM-DD HH:MM")
    include_repeats = forms.BooleanField(
        required=False,
        label="Include refusals that would be refused again",
        help_text="Steps refused for a reason in their run's input (a declined card, an item out of "
        "stock) are left out unless ticked: resubmitted as they are, they would be refused again.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and until <= since:
            self.add_error("until", "must be after 'failed from'")
        if since and until and until - since > timedelta(days=31):
            self.add_error("until", "the window is at most 31 days")
        return data


class BreakerForm(forms.Form):
    state = forms.ChoiceField(choices=[(OPEN, "Open (fail fast)"), (CLOSED, "Closed (let calls through)")])
    minutes = forms.IntegerField(
        min_value=BREAKER_HOLD_MIN_MINUTES,
        max_value=BREAKER_HOLD_MAX_MINUTES,
        initial=15,
        help_text=f"How long it is held ({BREAKER_HOLD_MIN_MINUTES}-{BREAKER_HOLD_MAX_MINUTES} minutes); "
        "then the breaker follows its own rules again.",
    )
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=operator.REASON_MAX)


class OperatorToolsMixin:
    """The operator's pages for `OperatorRunAdmin`."""

    admin_site: admin.AdminSite
    opts: Any

    def operator_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [
            path("bulk-resubmit/", wrap(self.bulk_resubmit_view), name="scheduler_run_bulk_resubmit"),
            path("sweep-preview/", wrap(self.sweep_preview_view), name="scheduler_run_sweep_preview"),
            path(
                "health/breaker/<str:service>/hold/",
                wrap(self.breaker_hold_view),
                name="scheduler_run_breaker_hold",
            ),
            path("<uuid:object_id>/act/<str:action>/", wrap(self.run_action_view), name="scheduler_run_act"),
        ]

    def _context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, **extra}

    # -- buttons on the run page ---------------------------------------------------------------

    def operator_buttons(self, request: HttpRequest, run: Run) -> list[dict[str, str]]:
        """The actions this user may take on this run now, as links to their confirmation pages.
        A step's button names the step by its workflow's label ("Resubmit: Refund the card"),
        its engine name in `step` (the button's tooltip)."""
        buttons: list[dict[str, str]] = []

        def add(action: str, label: str, step: Step | None = None) -> None:
            if not _has(request, RUN_ACTIONS[action].permission):
                return
            url = reverse("admin:scheduler_run_act", args=[run.pk, action])
            if step is not None:
                url += f"?step={step.pk}"
                label = f"{label}: {step_label_of(run.workflow, step.name)}"
            buttons.append({"url": url, "label": label, "action": action, "step": step.name if step else ""})

        if run.state in (Run.State.PENDING, Run.State.RUNNING):
            add("cancel", "Cancel run")
            add("compensate", "Compensate run")
        if run.state == Run.State.FAILED:
            add("resume", "Resume compensation")
        if run.state == Run.State.COMPENSATING:
            add("give_up", "Give up (Failed)")
        if (
            run.state == Run.State.COMPENSATED
            and not OperatorAction.objects.filter(run=run, action=OperatorAction.Action.RESUBMIT_RUN).exists()
        ):
            add("resubmit_run", "New run of this input")
        if run.state == Run.State.COMPENSATING and operator.forward_step_resubmittable(run=run):
            for step in run.steps.filter(kind=Step.Kind.FORWARD, process_state=Step.State.ERROR):
                add("resubmit_step", "Resubmit", step)
        for step in run.steps.filter(kind=Step.Kind.COMPENSATION).order_by("seq"):
            if step.process_state == Step.State.ERROR and run.state == Run.State.FAILED:
                add("resubmit_step", "Resubmit", step)
            if step.process_state == Step.State.PENDING and step.failure_count > 0:
                add("retry_compensation", "Retry now", step)
            if run.state in (Run.State.COMPENSATING, Run.State.FAILED) and step.process_state in (
                Step.State.WAITING,
                Step.State.PENDING,
                Step.State.PROCESSING,
                Step.State.ERROR,
            ):
                add("mark_done", "Mark done", step)
        return buttons

    # -- one action on a run or a step ---------------------------------------------------------

    def run_action_view(self, request: HttpRequest, object_id: uuid.UUID, action: str) -> HttpResponse:
        spec = RUN_ACTIONS.get(action)
        if spec is None:
            raise PermissionDenied("There is no such action on a run.")
        _require(request, spec.permission)
        if request.method not in ("GET", "POST"):
            return HttpResponse(status=405)
        run = get_object_or_404(Run, pk=object_id)
        step: Step | None = None
        if spec.on_step:
            raw = request.POST.get("step") if request.method == "POST" else request.GET.get("step")
            try:
                step = get_object_or_404(Step, pk=int(raw or ""), run_id=run.pk)
            except ValueError:
                return HttpResponse("choose a step of this run (step=<id>)", status=400)
        row = step if step is not None else run
        # Which idempotency key each step would send (scheduler/keys.py decides; issue 28).
        keys = [step_key_choice(step)] if step is not None else []
        if action == "resume":
            keys = [
                step_key_choice(s)
                for s in run.steps.filter(kind=Step.Kind.COMPENSATION, process_state=Step.State.ERROR)
            ]
        explains = spec.explains
        if action == "resubmit_step" and step is not None and step.kind == Step.Kind.FORWARD:
            explains = FORWARD_RESUBMIT_EXPLAINS
        context = self._context(
            request,
            title=spec.title,
            spec=spec,
            explains=explains,
            action=action,
            run=run,
            step=step,
            seen=_iso(row.updated_at),
            keys=keys,
            input_json=json.dumps(run.input, indent=2, sort_keys=True),
            reason="",
            error="",
            errors={},
            run_url=reverse("admin:scheduler_run_change", args=[run.pk]),
        )
        if request.method == "GET":
            return TemplateResponse(request, "admin/ops/operator_confirm.html", context)

        reason = request.POST.get("reason", "")
        context["reason"] = reason
        context["seen"] = request.POST.get("seen", "")
        try:
            entry = self._run_action_call(request, action, run=run, step=step, reason=reason)
        except OperatorRefused as exc:
            context["error"] = str(exc)
            context["errors"] = exc.errors
            if action == "resubmit_run" and "input" in request.POST:
                context["input_json"] = request.POST["input"]
            status = 409 if exc.code in ("state", "stale") else 400
            return TemplateResponse(request, "admin/ops/operator_confirm.html", context, status=status)
        done = f"{spec.title}: done. Reason: {entry.reason}"
        if entry.new_run_id:
            done += f" New run {entry.new_run_id}."
        messages.success(request, done)
        target = entry.new_run_id or run.pk
        return HttpResponseRedirect(reverse("admin:scheduler_run_change", args=[target]))

    def _run_action_call(
        self, request: HttpRequest, action: str, *, run: Run, step: Step | None, reason: str
    ) -> Any:
        user, seen = _operator(request), _seen(request)
        if action == "resubmit_step" and step is not None:
            return operator.step_resubmit(step_id=step.pk, user=user, reason=reason, seen=seen)
        if action == "resubmit_run":
            edited: Any = None
            text = request.POST.get("input", "").strip()
            if text:
                try:
                    edited = json.loads(text)
                except ValueError as exc:
                    raise OperatorRefused(
                        "input", f"the input is not JSON: {exc}", {"input": ["not JSON"]}
                    ) from exc
                if not isinstance(edited, dict):
                    raise OperatorRefused(
                        "input", "the input must be a JSON object", {"input": ["not an object"]}
                    )
            return operator.run_resubmit(run_id=run.pk, user=user, reason=reason, seen=seen, input=edited)
        if action in RUN_SERVICES:
            return RUN_SERVICES[action](run_id=run.pk, user=user, reason=reason, seen=seen)
        if action == "retry_compensation" and step is not None:
            return operator.step_compensation_retry(step_id=step.pk, user=user, reason=reason, seen=seen)
        if action == "mark_done" and step is not None:
            return operator.step_compensation_mark_done_by_operator(
                step_id=step.pk, user=user, reason=reason, seen=seen
            )
        raise PermissionDenied

    # -- the same actions on several runs: the changelist's actions, with a confirmation page -----

    def runs_action_confirm(
        self, request: HttpRequest, queryset: Any, action: str, admin_action: str
    ) -> HttpResponse | None:
        """A changelist action on the selected runs: first a page listing them as they are (each
        row's updated_at carried, like the single confirmation's) with a reason field; confirmed,
        the action's service per run (each its own transaction, its own audit entry), every
        outcome reported. A run changed since the page was shown is refused as stale."""
        spec = RUN_ACTIONS[action]
        _require(request, spec.permission)
        runs = list(queryset.order_by("-created_at")[:BULK_LIMIT])
        error = ""
        if request.POST.get("confirm") == "yes":
            reason = request.POST.get("reason", "")
            if reason.strip():
                user, done = _operator(request), []
                for run in runs:
                    seen = _seen_of(request.POST.get(f"seen-{run.pk}", ""))
                    try:
                        RUN_SERVICES[action](run_id=run.pk, user=user, reason=reason, seen=seen)
                    except OperatorRefused as exc:
                        messages.error(request, f"Run {str(run.pk)[-8:]}: refused, nothing done: {exc}")
                    else:
                        done.append(str(run.pk)[-8:])
                if done:
                    messages.success(request, f"{spec.title}: {len(done)} run(s): {', '.join(done)}.")
                return None
            error = "say why (the reason is required and kept in the audit)"
        context = self._context(
            request,
            title=f"{spec.title}: {len(runs)} run(s)",
            spec=spec,
            runs=[(run, _iso(run.updated_at)) for run in runs],
            admin_action=admin_action,
            error=error,
            reason=request.POST.get("reason", ""),
        )
        return TemplateResponse(
            request, "admin/ops/runs_action_confirm.html", context, status=400 if error else 200
        )

    # -- bulk resubmit: dry run, then do it ------------------------------------------------------

    def bulk_resubmit_view(self, request: HttpRequest) -> HttpResponse:
        _require(request, P_BULK)
        if request.method == "POST":
            return self._bulk_do(request)
        now = timezone.now().replace(second=0, microsecond=0)
        # The last hour, up to the end of this minute (a step that failed just now is in it).
        until = now + timedelta(minutes=1)
        form = BulkForm(request.GET or None, initial={"since": until - timedelta(hours=1), "until": until})
        items: list[operator.BulkItem] | None = None
        if form.is_bound and form.is_valid():
            try:
                items = operator.bulk_resubmit_plan(
                    reason=form.cleaned_data["match"],
                    since=form.cleaned_data["since"],
                    until=form.cleaned_data["until"],
                    include_repeats=form.cleaned_data["include_repeats"],
                )
            except OperatorRefused as exc:
                form.add_error(None, str(exc))
        planned = [i for i in items or [] if i.plan != "skip"]
        repeats = [i for i in items or [] if i.repeats]
        context = self._context(
            request,
            title="Resubmit failed steps in bulk",
            form=form,
            items=items,
            planned=planned,
            repeats=repeats,
            limit=BULK_LIMIT,
            at_limit=items is not None and len(items) >= BULK_LIMIT,
        )
        status = 400 if form.is_bound and not form.is_valid() else 200
        return TemplateResponse(request, "admin/ops/bulk_resubmit.html", context, status=status)

    def _bulk_do(self, request: HttpRequest) -> HttpResponse:
        tokens = request.POST.getlist("token")
        match = request.POST.get("match", "")
        try:
            outcomes = operator.bulk_resubmit(
                tokens=tokens, user=_operator(request), reason=request.POST.get("reason", ""), match=match
            )
        except OperatorRefused as exc:
            return HttpResponse(f"Refused, nothing done: {exc}", status=400, content_type="text/plain")
        done = sum(1 for o in outcomes if o.done)
        context = self._context(
            request,
            title="Bulk resubmission: done",
            outcomes=outcomes,
            done=done,
            refused=len(outcomes) - done,
        )
        return TemplateResponse(request, "admin/ops/bulk_resubmit_done.html", context)

    # -- the dry run of the next sweep -------------------------------------------------------------

    def sweep_preview_view(self, request: HttpRequest) -> HttpResponse:
        _require(request, P_SWEEP_PREVIEW)
        preview = step_expire_preview(limit=200)
        counts: dict[str, int] = {}
        for item in preview.items:
            counts[item.decision] = counts.get(item.decision, 0) + 1
        context = self._context(
            request, title="Dry run of the next supervisor sweep", preview=preview, counts=counts
        )
        return TemplateResponse(request, "admin/ops/sweep_preview.html", context)

    # -- a breaker held open or closed by hand ---------------------------------------------------

    def breaker_hold_view(self, request: HttpRequest, service: str) -> HttpResponse:
        _require(request, P_BREAKER)
        if not breaker_is_known(name=service):
            raise PermissionDenied("There is no circuit breaker of that name.")
        form = BreakerForm(request.POST or None)
        status = 200
        if request.method == "POST":
            if form.is_valid():
                try:
                    breaker_operate(
                        service=service,
                        state=form.cleaned_data["state"],
                        minutes=form.cleaned_data["minutes"],
                        user=_operator(request),
                        reason=form.cleaned_data["reason"],
                    )
                except OperatorRefused as exc:
                    form.add_error(None, str(exc))
                else:
                    messages.success(
                        request,
                        f"Breaker {service} held {form.cleaned_data['state']} for "
                        f"{form.cleaned_data['minutes']} min.",
                    )
                    return HttpResponseRedirect(reverse("admin:scheduler_run_health"))
            status = 400
        context = self._context(
            request,
            title=f"Hold the {service} breaker open or closed",
            form=form,
            service=service,
            breaker=breaker_statuses(services=(service,))[0],
        )
        return TemplateResponse(request, "admin/ops/breaker_hold.html", context, status=status)

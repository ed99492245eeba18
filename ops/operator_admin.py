"""The operator's tools on one run in the admin (issue 21; the operator's room, issue 27): the
buttons on the run's page, a confirmation page per action (a reason field and the row as it was
shown: its `updated_at`, carried in the form; a row changed since refuses the action as stale),
and the changelist's actions on several runs.

Which actions a run offers is the one selector's answer (`ops.run_actions.run_actions_fitting`):
the buttons list it, the confirmation page refuses (409, no form) an action it does not list, and
the services (`ops/run_services.py`) ask it again before they act. Each action needs its own
permission (`ACTIONS[...].permission`), checked on the page (GET) and again on the action (POST):
a read-only user gets 403 either way, and nothing is written. The other operator pages (bulk,
sweep preview, breakers) are `ops/operator_pages.py`.

Mixed into `OperatorRunAdmin` (ops/admin.py): the URLs live under /admin/scheduler/run/.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from scheduler.keys import step_key_choice
from scheduler.models import Run, Step
from scheduler.workflows import step_label_of

from . import run_services
from .audit import OperatorRefused
from .bulk import BULK_LIMIT
from .models import OperatorAction
from .operator_pages import OperatorPagesMixin, _iso, _operator, _require, _seen, _seen_of
from .run_actions import ACTIONS, run_actions_fitting

# A forward step's resubmission (in place, before anything was undone) says what else changes.
FORWARD_RESUBMIT_EXPLAINS = (
    "The step goes back to Pending with its failure count reset, with the idempotency key shown "
    "below (a new one if the remote refused the last one, else the same one, which the remote "
    "deduplicates by). Nothing has been undone yet: the run's compensation is "
    "called off and the run goes on from this step. To change the input, let the run be compensated "
    "and start a new run of it instead: a changed request needs new idempotency keys."
)

# The audited service each step action calls (the run-level ones: `run_services.run_operate`).
STEP_SERVICES: dict[str, Callable[..., OperatorAction]] = {
    "resubmit_step": run_services.step_resubmit_by_operator,
    "retry_compensation": run_services.step_compensation_retry_by_operator,
    "mark_done": run_services.step_compensation_mark_done_by_operator,
}


def _edited_input(request: HttpRequest) -> Any:
    """The edited input of a new run, None when left empty; refused unless a JSON object."""
    text = request.POST.get("input", "").strip()
    if not text:
        return None
    try:
        edited = json.loads(text)
    except ValueError as exc:
        raise OperatorRefused("input", f"the input is not JSON: {exc}", {"input": ["not JSON"]}) from exc
    if not isinstance(edited, dict):
        raise OperatorRefused("input", "the input must be a JSON object", {"input": ["not an object"]})
    return edited


class OperatorToolsMixin(OperatorPagesMixin):
    """The operator's pages for `OperatorRunAdmin`."""

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
            # The old direct POST (no reason, no audit) of cancel / resume / give up: it goes
            # through the audited action's page, which refuses a POST without a reason.
            path(
                "<uuid:object_id>/operate/<str:operation>/",
                wrap(require_POST(self.operate_view)),
                name="scheduler_run_operate",
            ),
        ]

    def operate_view(self, request: HttpRequest, object_id: uuid.UUID, operation: str) -> HttpResponse:
        if operation not in ("cancel", "resume", "give_up"):
            raise PermissionDenied
        return self.run_action_view(request, object_id, operation)

    # -- buttons on the run page ---------------------------------------------------------------

    def operator_buttons(self, request: HttpRequest, run: Run) -> list[dict[str, str]]:
        """The actions this user may take on this run now (the one selector's answer), as links
        to their confirmation pages. A step's button names the step by its workflow's label
        ("Resubmit: Refund the card"), its engine name in `step` (the button's tooltip)."""
        buttons: list[dict[str, str]] = []
        for fit in run_actions_fitting(run=run, user=request.user):
            url = reverse("admin:scheduler_run_act", args=[run.pk, fit.action])
            label = fit.spec.button
            if fit.step is not None:
                url += f"?step={fit.step.pk}"
                label = f"{label}: {step_label_of(run.workflow, fit.step.name)}"
            step = fit.step.name if fit.step is not None else ""
            buttons.append({"url": url, "label": label, "action": fit.action, "step": step})
        return buttons

    # -- one action on a run or a step ---------------------------------------------------------

    def run_action_view(self, request: HttpRequest, object_id: uuid.UUID, action: str) -> HttpResponse:
        spec = ACTIONS.get(action)
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
            fits=True,
            run_url=reverse("admin:scheduler_run_change", args=[run.pk]),
        )
        if request.method == "GET":
            fits = any(
                step is None or (f.step is not None and f.step.pk == step.pk)
                for f in run_actions_fitting(run=run, step_id=step.pk if step else None, actions=(action,))
            )
            if not fits:
                context.update(fits=False, error=f"run is {run.get_state_display()}; {spec.refusal}")
            return TemplateResponse(
                request, "admin/ops/operator_confirm.html", context, status=200 if fits else 409
            )

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
    ) -> OperatorAction:
        user, seen = _operator(request), _seen(request)
        if action == "resubmit_run":
            edited = _edited_input(request)
            return run_services.run_resubmit(run_id=run.pk, user=user, reason=reason, seen=seen, input=edited)
        if step is not None:
            return STEP_SERVICES[action](step_id=step.pk, user=user, reason=reason, seen=seen)
        return run_services.run_operate(action=action, run_id=run.pk, user=user, reason=reason, seen=seen)

    # -- the same actions on several runs: the changelist's actions, with a confirmation page -----

    def runs_action_confirm(
        self, request: HttpRequest, queryset: Any, action: str, admin_action: str
    ) -> HttpResponse | None:
        """A changelist action on the selected runs: first a page listing them as they are (each
        row's updated_at carried, like the single confirmation's) with a reason field; confirmed,
        the action's service per run (each its own transaction, its own audit entry), every
        outcome reported. A run changed since the page was shown is refused as stale."""
        spec = ACTIONS[action]
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
                        run_services.run_operate(
                            action=action, run_id=run.pk, user=user, reason=reason, seen=seen
                        )
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

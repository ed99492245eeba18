"""Pausing a whole customer or a whole workflow, as an operator (issue 30): the audited actions over
the engine's pause services (scheduler/services/holds.py) and their admin (the `Pause` rows: add
one to pause, the Resume button to end it). Permission: the operator's (`scheduler.change_run`,
"may operate", ops/roles.py); the audit entry commits with the pause or the resume."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from scheduler.models import Pause
from scheduler.services import PauseRefused, pause_create, pause_resume

from .audit import OperatorRefused, actor_name, audit_record, reason_checked
from .models import OperatorAction
from .operator_pages import _has, _operator, _require
from .run_actions import P_OPERATE


def _target(pause: Pause) -> str:
    return f"owner:{pause.owner_id}" if pause.scope == Pause.Scope.OWNER else f"workflow:{pause.workflow}"


def pause_operate(
    *, user: AbstractBaseUser, reason: str, owner_id: int | None = None, workflow: str = ""
) -> Pause:
    """Pause a customer (`owner_id`) or a workflow: no new step of it is dispatched from the
    commit; audited with who and why (the customer is shown the reason). Refused
    (OperatorRefused, nothing written): no reason, no or two scopes, unknown, already paused."""
    why = reason_checked(reason)
    with transaction.atomic():
        try:
            pause = pause_create(owner_id=owner_id, workflow=workflow, reason=why, by=actor_name(user))
        except PauseRefused as exc:
            raise OperatorRefused("input", str(exc), {k: [v] for k, v in exc.errors.items()}) from exc
        audit_record(action=OperatorAction.Action.PAUSE, user=user, reason=why, target=_target(pause))
    return pause


def pause_end(*, user: AbstractBaseUser, pause_id: int, reason: str) -> float:
    """Resume a pause: held steps due at once, deadlines shifted by the paused time, the held jobs
    fired by their catch-up policy. Audited. Returns the seconds it was paused. Refused
    (OperatorRefused): no reason, resumed already."""
    why = reason_checked(reason)
    with transaction.atomic():
        pause = Pause.objects.select_for_update().filter(pk=pause_id).first()
        if pause is None:
            raise OperatorRefused("state", "not paused (resumed already?)")
        target = _target(pause)
        released = pause_resume(pause_id=pause_id)
        audit_record(
            action=OperatorAction.Action.RESUME,
            user=user,
            reason=why,
            target=target,
            detail={
                "released": released.released,
                "occurrences": released.occurrences,
                "paused_seconds": round(released.paused_seconds, 3),
            },
        )
    return released.paused_seconds


class PauseForm(forms.ModelForm):
    class Meta:
        model = Pause
        fields = ("scope", "owner", "workflow", "reason")


class ResumeForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), help_text="Kept in the audit.")


@admin.register(Pause)
class PauseAdmin(admin.ModelAdmin):
    """Paused customers and workflows. Add one to pause (audited); open one and press Resume to
    end it (audited). Rows are never edited or deleted here: the services do both."""

    form = PauseForm
    list_display = ("scope", "owner", "workflow", "reason", "paused_by", "created_at")
    readonly_fields = ("paused_by", "created_at")
    change_form_template = "admin/ops/pause_change.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return _has(request, P_OPERATE)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Pause, form: Any, change: bool) -> None:
        data = form.cleaned_data
        owner = data.get("owner") if data["scope"] == Pause.Scope.OWNER else None
        try:
            created = pause_operate(
                user=_operator(request),
                reason=data["reason"],
                owner_id=owner.pk if owner else None,
                workflow=data.get("workflow", "") if data["scope"] == Pause.Scope.WORKFLOW else "",
            )
        except OperatorRefused as exc:
            messages.error(request, f"Not paused: {exc}")
            raise _Refused from exc
        obj.pk = created.pk

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        try:
            return super().add_view(request, form_url, extra_context)
        except _Refused:
            return HttpResponseRedirect(reverse("admin:scheduler_pause_add"))

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view(self.resume_view)
        return [path("<int:pause_id>/resume/", view, name="scheduler_pause_resume"), *super().get_urls()]

    def resume_view(self, request: HttpRequest, pause_id: int) -> HttpResponse:
        _require(request, P_OPERATE)
        pause = get_object_or_404(Pause, pk=pause_id)
        form = ResumeForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                seconds = pause_end(
                    user=_operator(request), pause_id=pause_id, reason=form.cleaned_data["reason"]
                )
            except OperatorRefused as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Resumed {pause} after {seconds:.0f} s.")
                return HttpResponseRedirect(reverse("admin:scheduler_pause_changelist"))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Resume {pause}",
            "pause": pause,
            "form": form,
        }
        return TemplateResponse(request, "admin/ops/pause_resume.html", context)


class _Refused(Exception):
    """The pause was refused: the add view shows the message instead of the saved row."""

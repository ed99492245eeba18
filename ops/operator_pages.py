"""The operator's pages that are not one action on one run (issue 21; split from
`ops/operator_admin.py` in issue 27): the bulk resubmission with its dry run, the dry run of the
next supervisor sweep, a breaker held open or closed by hand; and the helpers every operator page
shares (the permission check that says which role gives it, the acting user, the row's version
as shown).

Mixed into `OperatorRunAdmin` (ops/admin.py) through `OperatorToolsMixin`: the URLs live under
/admin/scheduler/run/.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from agents.breaker import CLOSED, OPEN
from scheduler.permissions import staff_may
from supervisor.services import step_expire_preview

from .audit import REASON_MAX, OperatorRefused
from .bulk import BULK_LIMIT, BulkItem, bulk_resubmit, bulk_resubmit_plan
from .roles import permission_missing_words
from .run_actions import P_BREAKER, P_BULK, P_SWEEP_PREVIEW
from .selectors import breaker_is_known, breaker_statuses
from .services import BREAKER_HOLD_MAX_MINUTES, BREAKER_HOLD_MIN_MINUTES, breaker_operate


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
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), max_length=REASON_MAX)


class OperatorPagesMixin:
    """The bulk, sweep-preview and breaker pages for `OperatorRunAdmin`."""

    admin_site: admin.AdminSite
    opts: Any

    def _context(self, request: HttpRequest, **extra: Any) -> dict[str, Any]:
        return {**self.admin_site.each_context(request), "opts": self.opts, **extra}

    # -- bulk resubmit: dry run, then do it ------------------------------------------------------

    def bulk_resubmit_view(self, request: HttpRequest) -> HttpResponse:
        _require(request, P_BULK)
        if request.method == "POST":
            return self._bulk_do(request)
        now = timezone.now().replace(second=0, microsecond=0)
        # The last hour, up to the end of this minute (a step that failed just now is in it).
        until = now + timedelta(minutes=1)
        form = BulkForm(request.GET or None, initial={"since": until - timedelta(hours=1), "until": until})
        items: list[BulkItem] | None = None
        if form.is_bound and form.is_valid():
            try:
                items = bulk_resubmit_plan(
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
            outcomes = bulk_resubmit(
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

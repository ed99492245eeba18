"""The catalogue pages: the reprice form and my reprices; a reprice run's page with its live
progress bar (static/catalogue/progress.js polls /api/runs/<id>/progress/).

Staff work only: the catalogue is shared by every customer, and repricing it is staff work
(`catalogue.reprice` is not customer-schedulable; the permission `scheduler.staff_work`,
scheduler/permissions.py). Signed out: the login page; signed in without it: 403 with a page
that says so."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods

from sasproject.not_found import AsNotFound
from scheduler.limits import LimitExceeded
from scheduler.models import Run
from scheduler.permissions import staff_may
from scheduler.selectors import run_progress
from scheduler.throttles import page_rate_refusal
from scheduler.workflows import WorkflowInputError, get_workflow

from .forms import RepriceForm
from .selectors import catalogue_summary, reprice_run_get, reprice_runs
from .services import reprice_submit
from .workflows import REPRICE_WORKFLOW

View = Callable[..., HttpResponse]


def staff_required(view: View) -> View:
    """Signed out: to the login page. Signed in without the staff-work permission (customers,
    read-only operators, staff in no group): 403, a page saying why."""

    @login_required
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not staff_may(request.user):
            return render(request, "catalogue/staff_only.html", status=403)
        return view(request, *args, **kwargs)

    return wrapped


@staff_required
@require_http_methods(["GET", "POST"])
def catalogue_view(request: HttpRequest) -> HttpResponse:
    form = RepriceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user_id = request.user.pk
        assert isinstance(user_id, int), "login_required guarantees a signed-in user"
        try:
            if refused := page_rate_refusal(request, "reprice"):
                raise refused
            run = reprice_submit(
                owner_id=user_id, by_staff=staff_may(request.user), percent=form.cleaned_data["percent"]
            )
        except LimitExceeded as exc:  # the reprice rate or the runs-in-flight quota
            form.add_error(None, exc.message)
        except WorkflowInputError as exc:
            for field, errors in exc.errors.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            return redirect("catalogue:reprice", run_id=run.pk)
    return render(
        request,
        "catalogue/index.html",
        {
            "form": form,
            "summary": catalogue_summary(),
            "runs": reprice_runs(user=request.user)[:20],
            "page_size": get_workflow(REPRICE_WORKFLOW).steps[0].page_size,
        },
    )


@staff_required
@require_GET
def reprice_detail_view(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    with AsNotFound("No such reprice.", Run.DoesNotExist):
        run = reprice_run_get(user=request.user, run_id=run_id)
    return render(
        request,
        "catalogue/reprice.html",
        {"run": run, "progress": run_progress(user=request.user, run_id=run.pk)},
    )

"""The order pages. Thin: forms parse, selectors read (scoped by the user), services write."""

from __future__ import annotations

import uuid
from typing import cast

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from reports.timeline import Timeline, run_timeline
from sasproject.not_found import AsNotFound
from scheduler.limits import LimitExceeded
from scheduler.models import Run
from scheduler.services import RunNotCancellable
from scheduler.throttles import page_rate_refusal
from scheduler.workflows import WorkflowInputError

from .forms import BaseItemFormSet, ItemFormSet, OrderForm
from .models import Order
from .reasons import customer_reason
from .selectors import OrderStatus, order_get, order_list, order_status
from .services import order_cancel, order_submit

PAGE_SIZE = 20


def _user_id(request: HttpRequest) -> int:
    user_id = request.user.pk
    assert isinstance(user_id, int), "login_required guarantees a signed-in user"
    return user_id


@login_required
@require_GET
def order_list_view(request: HttpRequest) -> HttpResponse:
    state = request.GET.get("state") or ""
    if state not in Run.State.values:
        state = ""
    page = Paginator(order_list(user=request.user, state=state or None), PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "orders/order_list.html",
        {"page": page, "state": state, "states": Run.State.choices},
    )


@login_required
@require_http_methods(["GET", "POST"])
def order_create_view(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = OrderForm(request.POST)
        items = cast(BaseItemFormSet, ItemFormSet(request.POST, prefix="items"))
        if form.is_valid() and items.is_valid():
            refused = page_rate_refusal(request, "order_submit")
            if refused is not None:
                return _refused(request, form, items, refused)
            data = {
                "items": items.items(),
                "amount": str(form.cleaned_data["amount"]),
                "currency": form.cleaned_data["currency"],
                "card": form.cleaned_data["card"],
            }
            try:
                order = order_submit(
                    owner_id=_user_id(request),
                    data=data,
                    callback_url=form.cleaned_data["callback_url"] or "",
                )
            except LimitExceeded as exc:  # the runs-in-flight quota
                return _refused(request, form, items, exc)
            except WorkflowInputError as exc:
                # The workflow's own checks (the form's mirror them, so this is rare): show each
                # message next to its field, item errors above the item rows.
                for field, errors in exc.errors.items():
                    for error in errors:
                        form.add_error(field if field in form.fields else None, error)
            else:
                # No flash message: the status page's banner says "Order placed..." for as long
                # as that is true, and follows the order's state after.
                return redirect("orders:detail", order_id=order.pk)
    else:
        form = OrderForm()
        items = cast(BaseItemFormSet, ItemFormSet(prefix="items"))
    return render(request, "orders/order_form.html", {"form": form, "items": items})


def _refused(
    request: HttpRequest, form: OrderForm, items: BaseItemFormSet, exc: LimitExceeded
) -> HttpResponse:
    """A rate or quota refused the order: the form again, its message naming the limit (429)."""
    response = render(
        request,
        "orders/order_form.html",
        {"form": form, "items": items, "throttled": exc.message},
        status=429,
    )
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


def _status_or_404(request: HttpRequest, order_id: uuid.UUID) -> OrderStatus:
    with AsNotFound("No such order.", Order.DoesNotExist):
        return order_status(user=request.user, order_id=order_id)


def _timeline(found: OrderStatus) -> Timeline:
    """The run's timeline as a customer reads it: the reasons of failed attempts, never the
    remote services' own words (those are for operators, in the admin)."""
    return run_timeline(
        run=found.run,
        now=timezone.now(),
        error_text=lambda operation, error: customer_reason(operation=operation, error=error),
        # An outage's 18 deferred tries are one bar, "attempts 1-18 ... 18 tries" (issue 21).
        group_repeats=True,
    )


@login_required
@require_GET
def order_detail_view(request: HttpRequest, order_id: uuid.UUID) -> HttpResponse:
    found = _status_or_404(request, order_id)
    return render(
        request,
        "orders/order_detail.html",
        {"status": found, "order": found.order, "data": found.as_dict(), "timeline": _timeline(found)},
    )


@login_required
@require_GET
def order_timeline_view(request: HttpRequest, order_id: uuid.UUID) -> HttpResponse:
    """The timeline alone (the status page swaps it in while the order runs)."""
    found = _status_or_404(request, order_id)
    html = render_to_string("orders/_order_timeline.html", {"timeline": _timeline(found)}, request=request)
    response = HttpResponse(html)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_GET
def order_status_view(request: HttpRequest, order_id: uuid.UUID) -> JsonResponse:
    """What the status page polls (same shape as the API's detail, minus the order fields)."""
    found = _status_or_404(request, order_id)
    response = JsonResponse(found.as_dict())
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def order_cancel_view(request: HttpRequest, order_id: uuid.UUID) -> HttpResponse:
    with AsNotFound("No such order.", Order.DoesNotExist):
        order = order_get(user=request.user, order_id=order_id)
    try:
        order_cancel(order=order, actor=f"user {request.user.get_username()} (web)")
    except RunNotCancellable:
        order.run.refresh_from_db()
        messages.error(
            request, f"This order can no longer be cancelled: it is {order.run.get_state_display().lower()}."
        )
    # Cancelled: the status page's banner says so ("Cancelling your order..."), in the run's tone.
    return redirect("orders:detail", order_id=order.pk)

"""Reads for the order pages and the API. Every one takes the user and scopes by it: another
user's order is simply not found (a 404), never a permission error that confirms it exists."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from scheduler.models import Run, RunEvent, Step

from .models import Order

# What a person sees for an engine state; the API shows the raw values.
STEP_STATE_LABELS: dict[str, str] = {
    Step.State.WAITING: "Pending",
    Step.State.PENDING: "Pending",
    Step.State.PROCESSING: "Processing",
    Step.State.PROCESSED: "Processed",
    Step.State.ERROR: "Error",
    Step.State.COMPENSATING: "Compensating",
    Step.State.COMPENSATED: "Compensated",
    Step.State.CANCELLED: "Cancelled",
}

User = AbstractBaseUser | AnonymousUser


def order_list(*, user: User, state: str | None = None) -> QuerySet[Order]:
    """The user's orders, newest first, optionally only those whose run is in `state`."""
    if not user.is_authenticated:
        return Order.objects.none()
    qs = Order.objects.filter(owner_id=user.pk).select_related("run").order_by("-created_at", "-id")
    if state:
        qs = qs.filter(run__state=state)
    return qs


def order_get(*, user: User, order_id: uuid.UUID | str) -> Order:
    """The user's order `order_id`; Order.DoesNotExist for anyone else's or a malformed id."""
    try:
        key = uuid.UUID(str(order_id))
    except ValueError:
        raise Order.DoesNotExist(f"no order {order_id!r}") from None
    return order_list(user=user).get(pk=key)


@dataclass(frozen=True)
class OrderStatus:
    order: Order
    run: Run
    steps: list[Step]
    events: list[RunEvent]

    @property
    def is_terminal(self) -> bool:
        return self.run.is_terminal

    @property
    def cancellable(self) -> bool:
        return self.run.state in (Run.State.PENDING, Run.State.RUNNING)

    def as_dict(self) -> dict[str, Any]:
        """The JSON the status page polls and the API's detail returns."""
        return {
            "state": self.run.state,
            "state_label": self.run.get_state_display(),
            "terminal": self.is_terminal,
            "cancellable": self.cancellable,
            "error": self.run.error,
            "steps": [step_as_dict(s) for s in self.steps],
            "events": [event_as_dict(e) for e in self.events],
        }


def order_status(*, user: User, order_id: uuid.UUID | str) -> OrderStatus:
    """The order, its run, its steps (forward then compensations) and its event log."""
    order = order_get(user=user, order_id=order_id)
    run = order.run
    steps = list(Step.objects.filter(run_id=run.pk).order_by("seq"))
    events = list(RunEvent.objects.filter(run_id=run.pk).order_by("id"))
    return OrderStatus(order=order, run=run, steps=steps, events=events)


def step_as_dict(step: Step) -> dict[str, Any]:
    return {
        "name": step.name,
        "kind": step.kind,
        "state": step.process_state,
        "state_label": STEP_STATE_LABELS.get(step.process_state, step.process_state),
        "attempts": step.attempts,
        "failure_count": step.failure_count,
        "max_failures": step.max_failures,
        "complete_by": step.complete_by.isoformat() if step.complete_by else None,
        "last_error": step.last_error,
    }


def event_as_dict(event: RunEvent) -> dict[str, Any]:
    return {
        "event_id": str(event.event_id),
        "type": event.type,
        "type_label": event.get_type_display(),
        "step": event.data.get("step"),
        "data": event.data,
        "at": event.created_at.isoformat(),
    }

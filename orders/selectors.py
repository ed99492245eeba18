"""Reads for the order pages and the API. Every one takes the user and scopes by it: another
user's order is simply not found (a 404), never a permission error that confirms it exists."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import QuerySet

from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.workflows import step_label_default, step_label_of

from .models import Order
from .reasons import customer_reason, order_banner

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

# An attempt's outcome as a person reads it.
ATTEMPT_STATUS_LABELS: dict[str, str] = {
    TaskExecutionHistory.Status.STARTED: "In progress",
    TaskExecutionHistory.Status.SUCCEEDED: "Succeeded",
    TaskExecutionHistory.Status.FAILED_TRANSIENT: "Failed",
    TaskExecutionHistory.Status.FAILED_PERMANENT: "Refused",
    TaskExecutionHistory.Status.TIMED_OUT: "No answer in time",
    TaskExecutionHistory.Status.CANCELLED: "Stopped",
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


# Forward steps whose work was done (and maybe undone since): they count as progress.
_DONE_STATES = (Step.State.PROCESSED, Step.State.COMPENSATING, Step.State.COMPENSATED)


@dataclass(frozen=True)
class Attempt:
    """One attempt of a step (a claim and its outcome), from the execution history."""

    number: int
    status: str
    status_label: str
    started_at: datetime
    ended_at: datetime | None
    error: str  # raw, as the agent or the supervisor recorded it (for operators and the API)
    reason: str  # the same, as a customer reads it ("" for no error)


@dataclass(frozen=True)
class OrderStatus:
    order: Order
    run: Run
    steps: list[Step]
    events: list[RunEvent]
    # Step id -> its attempts, oldest first.
    attempts: dict[int, list[Attempt]] = field(default_factory=dict)

    @property
    def is_terminal(self) -> bool:
        return self.run.is_terminal

    @property
    def cancellable(self) -> bool:
        return self.run.state in (Run.State.PENDING, Run.State.RUNNING)

    def step_label(self, name: str) -> str:
        return step_label_of(self.run.workflow, name)

    @property
    def progress(self) -> dict[str, int]:
        """Forward steps done of all forward steps; compensations done of all compensations."""
        forward = [s for s in self.steps if s.kind == Step.Kind.FORWARD]
        undo = [s for s in self.steps if s.kind == Step.Kind.COMPENSATION]
        return {
            "done": sum(s.process_state in _DONE_STATES for s in forward),
            "total": len(forward),
            "undone": sum(s.process_state == Step.State.PROCESSED for s in undo),
            "to_undo": len(undo),
        }

    @property
    def failure_reason(self) -> str:
        """The customer reason of the step that stopped the order (its last failed attempt)."""
        for step in self.steps:
            if step.process_state == Step.State.ERROR:
                failed = [a for a in self.attempts.get(step.pk, []) if a.error]
                if failed:
                    return failed[-1].reason
                return customer_reason(operation=step.operation, error=step.last_error)
        return ""

    @property
    def banner(self) -> dict[str, str]:
        tone, text = order_banner(run=self.run, failure=self.failure_reason)
        return {"tone": tone, "text": text}

    def as_dict(self, *, raw_errors: bool = False) -> dict[str, Any]:
        """The JSON the status page polls and the API's detail returns. Raw error texts (the
        remote services' own words) only with `raw_errors`, for the API; a customer's browser
        gets the reasons."""
        data: dict[str, Any] = {
            "state": self.run.state,
            "state_label": self.run.get_state_display(),
            "terminal": self.is_terminal,
            "cancellable": self.cancellable,
            "banner": self.banner,
            "progress": self.progress,
            "steps": [
                step_as_dict(s, label=self.step_label(s.name), attempts=self.attempts.get(s.pk, []))
                for s in self.steps
            ],
            "events": [
                {
                    **event_as_dict(e),
                    "step_label": self.step_label(e.data["step"]) if e.data.get("step") else None,
                }
                for e in self.events
            ],
        }
        if raw_errors:
            data["error"] = self.run.error
        else:
            for event in data["events"]:
                del event["data"]  # holds the raw errors of retries and failures
            for step in data["steps"]:
                del step["last_error"]
                for attempt in step["attempt_history"]:
                    del attempt["error"]
        return data


def order_status(*, user: User, order_id: uuid.UUID | str) -> OrderStatus:
    """The order, its run, its steps (forward then compensations), each step's attempts and the
    run's event log."""
    order = order_get(user=user, order_id=order_id)
    run = order.run
    steps = list(Step.objects.filter(run_id=run.pk).order_by("seq"))
    events = list(RunEvent.objects.filter(run_id=run.pk).order_by("id"))
    return OrderStatus(
        order=order, run=run, steps=steps, events=events, attempts=step_attempts(run=run, steps=steps)
    )


def step_attempts(*, run: Run, steps: list[Step]) -> dict[int, list[Attempt]]:
    """Every attempt of the run's steps, oldest first, with its outcome and error: the reasons
    of earlier failures stay visible after a later attempt succeeds. One query, served by
    history_run_started_idx. The caller has scoped `run` to its user."""
    operations = {s.pk: s.operation for s in steps}
    rows = TaskExecutionHistory.objects.filter(
        run_id=run.pk, kind=TaskExecutionHistory.Kind.ATTEMPT
    ).order_by("started_at", "id")
    found: dict[int, list[Attempt]] = {}
    for row in rows:
        if row.step_id is None:  # attempt rows always have their step; job rows are not read here
            continue
        attempts = found.setdefault(row.step_id, [])
        error = row.error if row.status != TaskExecutionHistory.Status.SUCCEEDED else ""
        attempts.append(
            Attempt(
                number=int(row.detail.get("attempt") or len(attempts) + 1),
                status=row.status,
                status_label=ATTEMPT_STATUS_LABELS.get(row.status, row.get_status_display()),
                started_at=row.started_at,
                ended_at=row.ended_at,
                error=error,
                reason=customer_reason(operation=operations.get(row.step_id, ""), error=error),
            )
        )
    return found


def step_as_dict(step: Step, *, label: str = "", attempts: list[Attempt] | None = None) -> dict[str, Any]:
    return {
        "name": step.name,
        "label": label or step_label_default(step.name),
        "kind": step.kind,
        "state": step.process_state,
        "state_label": STEP_STATE_LABELS.get(step.process_state, step.process_state),
        "attempts": step.attempts,
        "failure_count": step.failure_count,
        "max_failures": step.max_failures,
        "complete_by": step.complete_by.isoformat() if step.complete_by else None,
        "deadline": step.close_by.isoformat() if step.close_by else None,
        "last_error": step.last_error,
        "attempt_history": [
            {
                "attempt": a.number,
                "status": a.status,
                "status_label": a.status_label,
                "started_at": a.started_at.isoformat(),
                "ended_at": a.ended_at.isoformat() if a.ended_at else None,
                "error": a.error,
                "reason": a.reason,
            }
            for a in attempts or []
        ],
        # The same failures, repeated ones grouped: what the order page lists.
        "attempt_groups": attempt_groups(attempts or []),
    }


def _span_text(first: datetime, last: datetime) -> str:
    """17:14-17:15 (UTC, as the rest of the page); to the second within one minute."""
    if first.strftime("%H:%M") == last.strftime("%H:%M"):
        begin, end = first.strftime("%H:%M:%S"), last.strftime("%H:%M:%S")
        return begin if begin == end else f"{begin}\u2013{end}"
    return f"{first:%H:%M}\u2013{last:%H:%M}"


def attempt_groups(attempts: list[Attempt]) -> list[dict[str, Any]]:
    """The failed attempts as a customer reads them, consecutive ones with the same reason as
    one line: "The payment service was not available at that moment. 17:14-17:15, 18 tries",
    not 18 lines after a one-minute outage. An attempt with no reason (a success, one still
    running) ends a group; its order is kept (oldest first). A group's status is its last try's."""
    groups: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for a in attempts:
        if not a.reason:
            current = None
            continue
        if current is not None and current["reason"] == a.reason:
            # The same sentence for the customer (a 503, then the breaker it opened): one line.
            current["tries"] += 1
            current["status"] = a.status
            current["last_attempt"] = a.number
            current["_last"] = a.ended_at or a.started_at
        else:
            current = {
                "reason": a.reason,
                "status": a.status,
                "tries": 1,
                "first_attempt": a.number,
                "last_attempt": a.number,
                "_first": a.started_at,
                "_last": a.ended_at or a.started_at,
            }
            groups.append(current)
    for g in groups:
        first, last = g.pop("_first"), g.pop("_last")
        g["from"], g["to"] = first.isoformat(), last.isoformat()
        if g["tries"] == 1:
            g["label"] = f"Attempt {g['first_attempt']}"
            g["when"] = ""
        else:
            g["label"] = f"Attempts {g['first_attempt']}\u2013{g['last_attempt']}"
            g["when"] = f"{_span_text(first, last)}, {g['tries']} tries"
    return groups


def event_as_dict(event: RunEvent) -> dict[str, Any]:
    return {
        "event_id": str(event.event_id),
        "type": event.type,
        "type_label": event.get_type_display(),
        "step": event.data.get("step"),
        "data": event.data,
        "at": event.created_at.isoformat(),
    }

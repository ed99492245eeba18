"""Alerts from the engine's signals: the supervisor reacts, the scheduler does not call it."""

from __future__ import annotations

import uuid
from typing import Any

from .alerts import alert_raise
from .models import Alert


def on_step_errored(
    sender: Any,
    *,
    run_id: uuid.UUID | str,
    step_id: int,
    step_name: str,
    kind: str,
    reason: str,
    permanent: bool,
    **kwargs: Any,
) -> None:
    """A step went to Error. Alerts are for people who must act:
    - a forward step refused for good (a declined card) is a business outcome: the run is
      compensated and the customer told why - no alert (a flood of them is a failure-rate
      alert rule's job);
    - a forward step out of attempts or past its deadline is one incident per step name (an
      outage fails many orders the same way): one open alert, counted;
    - a compensation refused for good leaves its run Failed, only partly undone: an operator
      must act on that run, so one critical alert per run.
    Runs inside the transaction of the change: no alert for a change that rolls back."""
    if kind == "forward":
        if permanent:
            return
        alert_raise(
            run_id=run_id,
            step_id=step_id,
            kind=Alert.Kind.STEP_FAILED,
            message=f"{step_name}: {reason}",
            key=f"step_failed:{step_name}",
        )
    else:
        alert_raise(
            run_id=run_id,
            step_id=step_id,
            kind=Alert.Kind.COMPENSATION_FAILED,
            severity=Alert.Severity.CRITICAL,
            message=(
                f"compensation {step_name} failed ({reason}); the run is only partly undone. "
                "Fix the cause, then use 'Resume compensation' on the run."
            ),
            key=f"compensation_failed:{run_id}",
        )


def on_step_struggling(
    sender: Any,
    *,
    run_id: uuid.UUID | str,
    step_id: int,
    step_name: str,
    failure_count: int,
    error: str,
    **kwargs: Any,
) -> None:
    """A compensation passed its alert threshold and keeps retrying: the customer's money or
    stock is still held. One open alert per step name (the incident), counted."""
    alert_raise(
        run_id=run_id,
        step_id=step_id,
        kind=Alert.Kind.COMPENSATION_STRUGGLING,
        severity=Alert.Severity.CRITICAL,
        message=(
            f"compensation {step_name} failed {failure_count} times ({error}); it keeps retrying. "
            "If the undo was done by other means, mark it done on the run's page."
        ),
        key=f"compensation_struggling:{step_name}",
    )

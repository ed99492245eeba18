"""Alerts from the engine's signals: the supervisor reacts, the scheduler does not call it."""

from __future__ import annotations

import uuid
from typing import Any

from .models import RuleKind
from .transitions import alert_raise


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
      outage fails many orders the same way): the "step in Error" rule's alert for that name,
      every affected run linked;
    - a compensation refused for good leaves its run Failed, only partly undone: an operator
      must act on it - the "run needing an operator" rule's one alert, every such run linked
      (refunds failing on 4 runs: one alert listing the 4 runs).
    Runs inside the transaction of the change: no alert for a change that rolls back."""
    if kind == "forward":
        if permanent:
            return
        alert_raise(
            kind=RuleKind.STEP_ERROR,
            subject=step_name,
            run_id=run_id,
            step_id=step_id,
            message=f"{step_name}: {reason}",
        )
    else:
        alert_raise(
            kind=RuleKind.RUN_NEEDS_OPERATOR,
            subject="",
            run_id=run_id,
            step_id=step_id,
            message=(
                f"compensation {step_name} failed ({reason}); the run is only partly undone. "
                "Fix the cause, then use 'Resume compensation' on the run."
            ),
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
        kind=RuleKind.COMPENSATION_STRUGGLING,
        subject=step_name,
        run_id=run_id,
        step_id=step_id,
        message=(
            f"compensation {step_name} failed {failure_count} times ({error}); it keeps retrying. "
            "If the undo was done by other means, mark it done on the run's page."
        ),
    )

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
    """A step went to Error: a forward step's failure is a warning (the run is being
    compensated); a compensation's is critical - the run is only partly undone and an operator
    must act. Runs inside the transaction of the change: no alert for a change that rolls back."""
    if kind == "forward":
        alert_raise(
            run_id=run_id, step_id=step_id, kind=Alert.Kind.STEP_FAILED, message=f"{step_name}: {reason}"
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
        )

"""What every audited operator action shares (issue 21; the operator's room since issue 27): the
refusal, the reason's check, the stale check, the audit entry and the history row.

A refused action writes nothing: each service raises `OperatorRefused` inside its transaction,
before or instead of its writes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from adminkit.actors import actor_name
from scheduler.keys import KeyChoice
from scheduler.models import Run, Step, TaskExecutionHistory

from .models import OperatorAction

audit_logger = logging.getLogger("sas.operator")

REASON_MAX = 2000


class OperatorRefused(Exception):
    """The action was refused and nothing was written. `code`: "state" (the row is not in a
    state the action applies to), "stale" (it changed since the page was shown), "reason" (no
    reason given), "input" (the edited input is invalid: `errors` by field)."""

    def __init__(self, code: str, message: str, errors: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.errors = dict(errors or {})


def reason_checked(reason: str) -> str:
    """The reason, stripped; refused when empty, too long or holding a NUL."""
    text = (reason or "").strip()
    if not text:
        raise OperatorRefused("reason", "say why (the reason is required and kept in the audit)")
    if len(text) > REASON_MAX:
        raise OperatorRefused("reason", f"the reason is at most {REASON_MAX} characters")
    if "\x00" in text:
        # PostgreSQL's text refuses NUL: refused here, not as a DataError at the INSERT (a 500
        # in the admin). Found by tests/test_properties_bad_input.py (issue 22).
        raise OperatorRefused("reason", "the reason may not contain a NUL character")
    return text


def stale_or_state(row: Step | Run | None, seen: datetime, state_message: str) -> OperatorRefused:
    """Why an action touched nothing: the row changed since the form was shown (stale), or it
    is as shown but not in a state the action applies to."""
    if row is None:
        return OperatorRefused("state", "no such row")
    if row.updated_at != seen:
        return OperatorRefused(
            "stale", "it changed since the page was shown (nothing was done): look again and confirm"
        )
    return OperatorRefused("state", state_message)


def audit_record(
    *,
    action: str,
    user: AbstractBaseUser,
    reason: str,
    run_id: uuid.UUID | str | None = None,
    step_id: int | None = None,
    new_run_id: uuid.UUID | str | None = None,
    target: str = "",
    detail: dict[str, Any] | None = None,
) -> OperatorAction:
    """One audit entry (the caller's transaction), and its log line."""
    entry = OperatorAction.objects.create(
        action=action,
        run_id=run_id,
        step_id=step_id,
        new_run_id=new_run_id,
        actor_id=user.pk,
        actor_name=actor_name(user),
        reason=reason,
        target=target,
        detail=detail or {},
    )
    audit_logger.info("%s by %s on %s: %s", action, entry.actor_name, run_id or target, reason)
    return entry


def history_record(
    *,
    run_id: uuid.UUID | str,
    step_id: int,
    user: AbstractBaseUser,
    action: str,
    reason: str,
    key: KeyChoice | None = None,
) -> None:
    """The operator's row in the run's history; with `key`, which idempotency key the step
    sends from now on and why (`KeyChoice.note`, issue 28)."""
    now = timezone.now()
    extra: dict[str, Any] = {} if key is None else {**key.as_detail(), "note": key.note}
    TaskExecutionHistory.objects.create(
        step_id=step_id,
        run_id=run_id,
        kind=TaskExecutionHistory.Kind.OPERATOR,
        status=TaskExecutionHistory.Status.ACTION,
        worker=actor_name(user),
        started_at=now,
        ended_at=now,
        detail={"action": action, "reason": reason[:500], **extra},
    )

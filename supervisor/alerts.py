"""Raising operator alerts: a stored row (shown in the admin) and an ERROR log line."""

from __future__ import annotations

import logging
import uuid

from .models import Alert

logger = logging.getLogger("sas.alerts")


def alert_raise(
    *,
    run_id: uuid.UUID | str,
    step_id: int | None,
    kind: str,
    message: str,
    severity: str = Alert.Severity.WARNING,
) -> Alert:
    """Store an alert and log it. Runs inside the caller's transaction: no alert for a change
    that rolls back."""
    alert = Alert.objects.create(
        run_id=run_id, step_id=step_id, kind=kind, severity=severity, message=message
    )
    logger.error("ALERT %s run=%s step=%s: %s", kind, run_id, step_id, message)
    return alert

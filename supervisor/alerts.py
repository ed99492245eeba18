"""Raising operator alerts: a stored row (shown in the admin) and an ERROR log line."""

from __future__ import annotations

import logging
import uuid

from django.db.models import F
from django.db.models.functions import Now

from .models import Alert

logger = logging.getLogger("sas.alerts")


def alert_raise(
    *,
    run_id: uuid.UUID | str,
    step_id: int | None,
    kind: str,
    message: str,
    severity: str = Alert.Severity.WARNING,
    key: str = "",
) -> Alert:
    """Store an alert and log it - or, while an unacknowledged alert with the same `key` is
    open, count this one on it (one alert per incident, not one per order). Runs inside the
    caller's transaction: no alert for a change that rolls back; the open alert's row is locked
    while it is counted, so two raisers never both create one."""
    if key:
        updated = (
            Alert.objects.select_for_update()
            .filter(key=key, acknowledged_at__isnull=True)
            .order_by("-created_at")
            .first()
        )
        if updated is not None:
            Alert.objects.filter(pk=updated.pk).update(count=F("count") + 1, last_seen_at=Now())
            logger.warning(
                "ALERT %s again (incident %s) run=%s step=%s: %s", kind, key, run_id, step_id, message
            )
            return updated
    alert = Alert.objects.create(
        run_id=run_id, step_id=step_id, kind=kind, severity=severity, message=message, key=key
    )
    logger.error("ALERT %s run=%s step=%s: %s", kind, run_id, step_id, message)
    return alert

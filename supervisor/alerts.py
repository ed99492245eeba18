"""Raising operator alerts: a stored row (shown in the admin) and an ERROR log line."""

from __future__ import annotations

import logging
import uuid

from django.db import connection

from .models import Alert

logger = logging.getLogger("sas.alerts")


# One statement: a new alert, or one more occurrence of the open alert with the same key. The
# conflict target is the partial unique index alert_open_key_unique.
_RAISE_SQL = """
INSERT INTO supervisor_alert (run_id, step_id, kind, severity, message, key, count, created_at, last_seen_at)
VALUES (%(run_id)s, %(step_id)s, %(kind)s, %(severity)s, %(message)s, %(key)s, 1,
        statement_timestamp(), statement_timestamp())
ON CONFLICT (key) WHERE acknowledged_at IS NULL AND key <> ''
DO UPDATE SET count = supervisor_alert.count + 1, last_seen_at = statement_timestamp()
RETURNING id, count
"""


def alert_raise(
    *,
    run_id: uuid.UUID | str,
    step_id: int | None,
    kind: str,
    message: str,
    severity: str = Alert.Severity.WARNING,
    key: str = "",
) -> int:
    """Store an alert and log it - or, while an unacknowledged alert with the same `key` is
    open, count this one on it (one alert per incident, not one per order; concurrent raisers
    meet on a unique index). Runs inside the caller's transaction: no alert for a change that
    rolls back. Returns the alert's id."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RAISE_SQL,
            {
                "run_id": str(run_id),
                "step_id": step_id,
                "kind": kind,
                "severity": severity,
                "message": message,
                "key": key,
            },
        )
        alert_id, count = cursor.fetchone()
    if count == 1:
        logger.error("ALERT %s run=%s step=%s: %s", kind, run_id, step_id, message)
    else:
        logger.warning("ALERT %s again (%d times, incident %s) run=%s: %s", kind, count, key, run_id, message)
    return int(alert_id)

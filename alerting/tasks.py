"""Alerting tasks: the evaluator's periodic tick (beat, queue supervisor) and the e-mail of one
announcement (queue agent.webhook: an SMTP server that hangs holds a webhook thread, never the
supervisor). Thin: they call alerting/services.py."""

from __future__ import annotations

import logging
import smtplib
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError

from .services import alert_email_build, alert_rules_evaluate

logger = logging.getLogger("sas.alerts")


# A periodic engine task like the sweep: no task events (one a second would bury the agents'
# tasks in Flower and cost each one's events, bench/README.md "Monitoring"); its health signal
# is its last success, recorded by liveness (liveness/last_run.py: the engine-health page,
# /metrics and the dead man's switch).
@shared_task(name="alerting.evaluate", ignore_result=True, send_events=False)
def alerting_evaluate() -> dict[str, Any]:
    """One evaluation tick. Off (returns) when SAS_ALERTS_ENABLED is off. Survives a database
    outage: logs and returns, the next tick (or the watchdog) tries again."""
    if not settings.SAS_ALERTS_ENABLED:
        return {"ran": False}
    try:
        tick = alert_rules_evaluate()
    except DatabaseError:
        logger.exception("alert evaluation failed; next tick retries")
        return {"ran": False}
    return {
        "ran": tick.ran,
        "rules": tick.rules,
        "announced": tick.announced,
        "not_evaluated": tick.not_evaluated,
    }


@shared_task(
    name="alerting.email_send",
    ignore_result=True,
    autoretry_for=(OSError, smtplib.SMTPException),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=10,
)
def alert_email_send(*, alert_id: int, state: str) -> bool:
    """Send one alert e-mail through Django's mail backend (EMAIL_BACKEND). A failed send
    (connection refused, SMTP error) is retried with backoff, up to 10 times."""
    message = alert_email_build(alert_id=alert_id, state=state)
    if message is None:
        return False
    message.send(fail_silently=False)
    return True

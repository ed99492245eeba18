"""Alerting services: one evaluation tick of every enabled rule, and the announcements it
makes (e-mail and signed webhook), queued - never sent - by the evaluator.

Invariant: a tick is idempotent and bounded (at most SAS_ALERT_MAX_RULES rules, each one
index-backed statement, alerting/conditions.py); two evaluators (beat's periodic task and the
control worker's watchdog, docs/decisions.md) never run a tick at once - a PostgreSQL advisory
lock, tried, not waited for. Each rule's writes are one transaction; a rule whose condition
fails to read (a Redis or database error) is logged and skipped, the others still run.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import DatabaseError, connection, transaction
from django.db.models import F

from scheduler.services import run_submit
from supervisor.alerts import alert_announcements_claim, alert_observe
from supervisor.models import ALERT_OPEN_STATES, Alert, AlertRule, RuleKind

from . import liveness
from .conditions import CONDITIONS
from .webhook import ALERT_WEBHOOK_WORKFLOW

logger = logging.getLogger("sas.alerts")

# pg_try_advisory_lock key of the evaluator ("sasalert" in ASCII, shortened to a bigint).
EVALUATOR_LOCK = 0x7361_7361_6C72
EVALUATE_TASK = "alerting.evaluate"


@dataclass(frozen=True)
class Tick:
    ran: bool
    rules: int = 0
    open_alerts: int = 0
    announced: int = 0
    seconds: float = 0.0


def alert_rules_evaluate() -> Tick:
    """Evaluate every enabled rule once; announce what changed. See the module docstring."""
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [EVALUATOR_LOCK])
        (locked,) = cursor.fetchone()
    if not locked:
        return Tick(ran=False)
    try:
        # Operator rules first: customers' rules can never crowd them out of the cap.
        rules = list(
            AlertRule.objects.filter(enabled=True)
            .select_related("job")
            .order_by(F("owner_id").asc(nulls_first=True), "id")[: settings.SAS_ALERT_MAX_RULES]
        )
        # Every open alert, in one query (alert_open_rule_idx): what each rule has open now.
        open_now: dict[int, dict[str, str]] = {}
        for rule_id, subject, state in Alert.objects.filter(
            state__in=ALERT_OPEN_STATES, rule__isnull=False
        ).values_list("rule_id", "subject", "state"):
            open_now.setdefault(rule_id, {})[subject] = state
        open_alerts = 0
        for rule in rules:
            open_alerts += _rule_evaluate(rule=rule, open_now=open_now.get(rule.pk, {}))
        announced = alert_announce()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [EVALUATOR_LOCK])
    try:
        liveness.last_run_record(task=EVALUATE_TASK)
    except redis.RedisError:
        logger.warning("could not record the evaluator's run in Redis")
    return Tick(
        ran=True,
        rules=len(rules),
        open_alerts=open_alerts,
        announced=announced,
        seconds=time.perf_counter() - started,
    )


def _rule_evaluate(*, rule: AlertRule, open_now: dict[str, str]) -> int:
    try:
        findings = CONDITIONS[rule.kind](rule)
        if not findings and not open_now:
            return 0  # nothing to open, nothing to resolve: no write
        hold = timedelta(seconds=rule.threshold) if rule.kind == RuleKind.CIRCUIT_OPEN else None
        with transaction.atomic():
            return alert_observe(rule=rule, findings=findings, for_duration=hold, open_now=open_now)
    except (DatabaseError, redis.RedisError, OSError):
        logger.exception("alert rule %s (%s) could not be evaluated; next tick retries", rule.pk, rule.name)
        return 0


def alert_announce(*, limit: int = 100) -> int:
    """Claim the alert changes not yet announced and queue their notifications, in one
    transaction: e-mails as tasks (sent on commit), webhooks as `alert_webhook` runs."""
    with transaction.atomic():
        claimed = alert_announcements_claim(limit=limit)
        if not claimed:
            return 0
        alerts = Alert.objects.select_related("rule", "rule__owner", "rule__job").in_bulk(
            [i for i, _ in claimed]
        )
        for alert_id, state in claimed:
            alert = alerts[alert_id]
            if alert.rule is None:
                continue
            _notify(alert=alert, rule=alert.rule, state=state)
    return len(claimed)


def _notify(*, alert: Alert, rule: AlertRule, state: str) -> None:
    from .tasks import alert_email_send as alert_email_send_task

    logger.warning("ALERT %s %s: %s", state.upper(), rule.name, alert.message)
    if rule.notify_email and alert_recipients(rule=rule):
        alert_id = alert.pk
        transaction.on_commit(lambda: alert_email_send_task.delay(alert_id=alert_id, state=state))
    url = rule.webhook_url or ("" if rule.owner_id else settings.SAS_ALERT_WEBHOOK_URL)
    if rule.notify_webhook and url:
        run_submit(
            workflow=ALERT_WEBHOOK_WORKFLOW,
            input={"url": url, "body": alert_body(alert=alert, state=state), "owner_id": rule.owner_id},
            priority=-1,
            correlation_id=f"alert:{alert.pk}",
        )


def alert_recipients(*, rule: AlertRule) -> list[str]:
    """A customer's rule: its owner only (never ADMINS, never an address they typed - a rule
    must not make the platform mail strangers). An operator rule: its list, else ADMINS."""
    if rule.owner_id is not None:
        email = rule.owner.email if rule.owner is not None else ""
        return [email] if email else []
    listed = [a.strip() for a in rule.recipients.split(",") if a.strip()]
    return listed or [address for _, address in settings.ADMINS]


def alert_document(*, alert: Alert, state: str) -> dict[str, Any]:
    rule = alert.rule
    runs = [str(r) for r in alert.links.order_by("-linked_at").values_list("run_id", flat=True)[:50]]
    return {
        "event": f"alert.{state}",
        "alert": {
            "id": alert.pk,
            "rule": rule.name if rule else "",
            "kind": alert.kind,
            "severity": alert.severity,
            "subject": alert.subject,
            "message": alert.message,
            "state": state,
            "count": alert.count,
            "fired_at": alert.fired_at.isoformat() if alert.fired_at else None,
            "resolved_at": alert.resolved_at.isoformat() if alert.resolved_at else None,
            "job_id": rule.job_id if rule else None,
            "runs": runs,
        },
    }


def alert_body(*, alert: Alert, state: str) -> str:
    return json.dumps(alert_document(alert=alert, state=state), separators=(",", ":"), sort_keys=True)


def alert_email_build(*, alert_id: int, state: str) -> EmailMessage | None:
    """The e-mail for one announcement, or None if the alert or its recipients are gone."""
    alert = Alert.objects.select_related("rule", "rule__owner").filter(pk=alert_id).first()
    if alert is None or alert.rule is None:
        return None
    to = alert_recipients(rule=alert.rule)
    if not to:
        return None
    doc = alert_document(alert=alert, state=state)["alert"]
    word = "RESOLVED" if state == "resolved" else "FIRING"
    subject = f"[{alert.severity}] {word}: {alert.rule.name}" + (
        f" ({alert.subject})" if alert.subject else ""
    )
    lines = [
        f"{word}: {alert.rule.name}",
        "",
        alert.message,
        "",
        f"Severity: {alert.severity}",
        f"Occurrences: {alert.count}",
        f"Fired at: {doc['fired_at'] or '-'}",
    ]
    if state == "resolved":
        lines.append(f"Resolved at: {doc['resolved_at']}")
    if doc["runs"]:
        lines += ["", "Affected runs:", *[f"  {run}" for run in doc["runs"]]]
    return EmailMessage(
        subject=f"{settings.EMAIL_SUBJECT_PREFIX}{subject}",
        body="\n".join(lines) + "\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=to,
    )

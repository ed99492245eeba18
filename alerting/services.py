"""Alerting services: one evaluation tick of every enabled rule, and the announcements it
makes (e-mail and signed webhook), queued - never sent - by the evaluator.

Invariant: a tick is idempotent and bounded (at most SAS_ALERT_MAX_RULES rules - no more can be
enabled, alerting/rules.py, and any over it from before are logged and counted; one
index-backed statement or Redis pipeline per rule *kind*, alerting/conditions.py); two
evaluators (beat's periodic task and the control worker's watchdog, docs/decisions.md, record 10) never run
a tick at once - a PostgreSQL advisory lock, tried, not waited for. The tick's round trips, so
that it fits in a few milliseconds (issue 21's benchmark, bench/README.md "Alerting"): the lock,
one read of the rules with their open alerts and whether an announcement is due, one statement
per kind, then the writes set-based (alerting/transitions.py, `alerts_observe`: opens, links and
resolutions of every rule in one transaction, or the links statement alone in an incident's
steady state), the announcement claim only when something is due, the unlock. A rule whose
condition fails to read (a Redis or database error) is logged and skipped - its alerts stay as
they are - and the others still run (alerting/conditions.py, `conditions_evaluate`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import redis
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import BooleanField, F, JSONField
from django.db.models.expressions import RawSQL
from django.urls import reverse

from liveness.last_run import last_run_record
from sasproject.database import session_connection
from sasproject.names import control_characters_replaced
from scheduler.services import run_submit

from .conditions import conditions_evaluate
from .models import Alert, AlertRule, RuleKind
from .transitions import (
    Observation,
    alert_announcements_claim,
    alerts_observe,
    announcements_due_sql,
    open_alerts_of_rule_sql,
)
from .webhook import (
    ALERT_CORRELATION_PREFIX,
    ALERT_WEBHOOK_NO_SECRET,
    ALERT_WEBHOOK_WORKFLOW,
    alert_webhook_secret,
)
from .words import duration_words

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
    # Enabled rules past SAS_ALERT_MAX_RULES, left out of this tick (logged).
    not_evaluated: int = 0


def alert_rules_evaluate() -> Tick:
    """Evaluate every enabled rule once; announce what changed. See the module docstring."""
    started = time.perf_counter()
    # A session lock, held across the tick's transactions: on the connection that keeps its
    # session behind a transaction-mode pooler (sasproject/database.py); taken through the pooler
    # it would stay on whichever server connection ran it, and be "held" by every client that
    # gets that connection next.
    lock = session_connection()
    with lock.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [EVALUATOR_LOCK])
        (locked,) = cursor.fetchone()
    if not locked:
        return Tick(ran=False)
    try:
        # Operator rules first: customers' rules can never crowd them out of the cap.
        rules = list(
            AlertRule.objects.filter(enabled=True)
            .annotate(
                # Static statements of sql/alerts.sql, no parameter: nothing to inject.
                open_alerts=RawSQL(open_alerts_of_rule_sql(), (), output_field=JSONField()),  # noqa: S611
                announcements_due=RawSQL(announcements_due_sql(), (), output_field=BooleanField()),  # noqa: S611
            )
            # One past the cap: whether any is left out (below).
            .order_by(F("owner_id").asc(nulls_first=True), "id")[: settings.SAS_ALERT_MAX_RULES + 1]
        )
        not_evaluated = 0
        if len(rules) > settings.SAS_ALERT_MAX_RULES:
            # Past the cap: none can be enabled past it now (alerting/rules.py), but rules
            # enabled before it was lowered can be - never silently skipped (issue 26).
            rules = rules[: settings.SAS_ALERT_MAX_RULES]
            not_evaluated = AlertRule.objects.filter(enabled=True).count() - len(rules)
            logger.error(
                "%d enabled alert rule(s) over SAS_ALERT_MAX_RULES (%d) are not evaluated (the "
                "newest customer rules first): disable or delete rules, or raise the setting",
                not_evaluated,
                settings.SAS_ALERT_MAX_RULES,
            )
        by_kind: dict[str, list[AlertRule]] = defaultdict(list)
        for rule in rules:
            by_kind[rule.kind].append(rule)
        found = conditions_evaluate(by_kind)
        observations = [
            Observation(
                rule=rule,
                findings=found[rule.pk],
                open_now={subject: state for subject, (state, _) in rule.open_alerts.items()},
                open_messages={subject: message for subject, (_, message) in rule.open_alerts.items()},
                hold=timedelta(seconds=rule.threshold) if rule.kind == RuleKind.CIRCUIT_OPEN else None,
            )
            for rule in rules
            if rule.pk in found  # a rule not evaluated: its alerts stay as they are
        ]
        observed = alerts_observe(observations=observations)
        # No rule: nothing says whether an engine-raised alert waits (rare; claim to be sure).
        due = not rules or rules[0].announcements_due
        announced = alert_announce() if observed.changed or due else 0
    finally:
        with lock.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [EVALUATOR_LOCK])
    try:
        last_run_record(task=EVALUATE_TASK)
    except redis.RedisError:
        logger.warning("could not record the evaluator's run in Redis")
    return Tick(
        ran=True,
        rules=len(rules),
        open_alerts=observed.open_alerts,
        announced=announced,
        seconds=time.perf_counter() - started,
        not_evaluated=not_evaluated,
    )


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
    if rule.notify_webhook and url and rule.owner_id is None and not alert_webhook_secret():
        logger.error("ALERT %s %s: %s", state.upper(), rule.name, ALERT_WEBHOOK_NO_SECRET)
    elif rule.notify_webhook and url:
        run_submit(
            workflow=ALERT_WEBHOOK_WORKFLOW,
            input={
                "url": url,
                "body": alert_body(alert=alert, state=state),
                "owner_id": rule.owner_id,
                "event_id": alert_event_id(alert=alert, state=state),
            },
            priority=-1,
            # The agent reads whose secret signs from this alert (alerting/webhook.py).
            correlation_id=f"{ALERT_CORRELATION_PREFIX}{alert.pk}",
        )


def alert_recipients(*, rule: AlertRule) -> list[str]:
    """A customer's rule: its owner only (never ADMINS, never an address they typed - a rule
    must not make the platform mail strangers). An operator rule: its list, else ADMINS."""
    if rule.owner_id is not None:
        email = rule.owner.email if rule.owner is not None else ""
        return [email] if email else []
    listed = [a.strip() for a in rule.recipients.split(",") if a.strip()]
    return listed or [address for _, address in settings.ADMINS]


# The namespace of alert event ids (uuid5 of it and the announcement).
ALERT_EVENT_NAMESPACE = uuid.UUID("6f3c2a9e-5b1d-4c8e-9a0f-2d7e8b4c1a53")


def alert_event_id(*, alert: Alert, state: str) -> str:
    """The receiver's dedupe key of one announcement (the `event_id` of the body and the
    `X-SAS-Event-Id` header): a UUID derived from the alert, the transition announced and when
    it was claimed (`announced_at`). Every retry of a delivery sends the same body, so the same
    id; two announcements never share one."""
    claimed = alert.announced_at.isoformat() if alert.announced_at else ""
    return str(uuid.uuid5(ALERT_EVENT_NAMESPACE, f"alert:{alert.pk}:{state}:{claimed}"))


def alert_document(*, alert: Alert, state: str) -> dict[str, Any]:
    """The webhook's body (and what the e-mail reads): the alert, and under "links" the same
    absolute links its e-mail carries (SAS_PUBLIC_URL; none when it is unset) - "alert" (an
    operator's rule), "job", and "runs": run id -> its page."""
    rule = alert.rule
    runs = [str(r) for r in alert.links.order_by("-linked_at").values_list("run_id", flat=True)[:50]]
    links = alert_links(alert=alert, runs=runs)
    return {
        "event": f"alert.{state}",
        "event_id": alert_event_id(alert=alert, state=state),
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
            "links": {
                **{page: links[page] for page in ("alert", "job") if page in links},
                "runs": {run: links[run] for run in runs if run in links},
            }
            if links
            else {},
        },
    }


def alert_body(*, alert: Alert, state: str) -> str:
    return json.dumps(alert_document(alert=alert, state=state), separators=(",", ":"), sort_keys=True)


def _email_opening(*, alert: Alert, state: str) -> list[str]:
    """What happened, first: the firing sentence; or what resolved and how long it lasted."""
    if state != "resolved" or alert.resolved_at is None:
        return [alert.message]
    lasted = duration_words(alert.resolved_at - (alert.fired_at or alert.created_at))
    name = alert.rule.name if alert.rule else alert.kind
    what = f"{name} ({alert.subject})" if alert.subject else name
    return [
        f"{what} is back to normal after {lasted}: the condition no longer holds.",
        f"Last seen while firing: {alert.message}",
    ]


def alert_links(*, alert: Alert, runs: list[str]) -> dict[str, str]:
    """Absolute links for an alert's mail, under SAS_PUBLIC_URL (none when it is unset): an
    operator's to the alert and the runs in the admin; a customer's to their job and its runs
    on the job pages (a customer has no admin). Keys: "alert", "job", and each run id."""
    base = str(settings.SAS_PUBLIC_URL).rstrip("/")
    rule = alert.rule
    if not base or rule is None:
        return {}
    if rule.owner_id is not None and rule.job_id is not None:
        job = rule.job_id
        links = {"job": base + reverse("jobs:detail", args=[job])}
        links.update({run: base + reverse("jobs:run", args=[job, run]) for run in runs})
        return links
    links = {"alert": base + reverse("admin:alerting_alert_change", args=[alert.pk])}
    if rule.job_id is not None:
        links["job"] = base + reverse("admin:scheduler_job_change", args=[rule.job_id])
    links.update({run: base + reverse("admin:scheduler_run_change", args=[run]) for run in runs})
    return links


def alert_email_build(*, alert_id: int, state: str) -> EmailMessage | None:
    """The e-mail for one announcement, or None if the alert or its recipients are gone."""
    alert = Alert.objects.select_related("rule", "rule__owner").filter(pk=alert_id).first()
    if alert is None or alert.rule is None:
        return None
    to = alert_recipients(rule=alert.rule)
    if not to:
        return None
    doc = alert_document(alert=alert, state=state)["alert"]
    pages = {page: url for page, url in doc["links"].items() if page != "runs"}
    links = {**pages, **doc["links"].get("runs", {})}
    word = "RESOLVED" if state == "resolved" else "FIRING"
    subject = f"[{alert.severity}] {word}: {alert.rule.name}" + (
        f" ({alert.subject})" if alert.subject else ""
    )
    # A rule or a subject stored before names were checked (issue 26) may hold a CR/LF, which
    # Django refuses in a header (BadHeaderError, and the alert was lost): replaced, it still goes.
    subject = control_characters_replaced(f"{settings.EMAIL_SUBJECT_PREFIX}{subject}")
    lines = [f"{word}: {alert.rule.name}", "", *_email_opening(alert=alert, state=state), ""]
    lines += [
        f"Severity: {alert.severity}",
        f"Occurrences: {alert.count}",
        f"Fired at: {doc['fired_at'] or '-'}",
    ]
    if state == "resolved":
        lines.append(f"Resolved at: {doc['resolved_at']}")
    if "alert" in links:
        lines.append(f"Alert: {links['alert']}")
    if "job" in links:
        lines.append(f"Job: {links['job']}")
    if doc["runs"]:
        lines += ["", "Affected runs:", *[f"  {links.get(run, run)}" for run in doc["runs"]]]
    return EmailMessage(
        subject=subject,
        body="\n".join(lines) + "\n",
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=to,
    )

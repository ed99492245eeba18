"""Alert transitions: raise (open or count), observe (the evaluator's findings for one rule),
resolve, and claim announcements. One SQL statement per transition, each a named statement of
sql/alerts.sql (read as scheduler/sql/queries.sql is); alerting/services.py decides when to call
them and how to deliver. (supervisor/alerts.py until issue 27.)

States: pending -> firing -> resolved (and pending -> resolved silently when the condition
clears before its for-duration). An incident that comes back after it resolved is a new alert
(row) - whether or not within the rule's cooldown: it waits out its for-duration again, and
reports its own start and count (issue 27). The cooldown holds pages, not alerts: a new
incident's first page waits until the cooldown has passed since the key's last page, and an
incident that ends before its first page is announced to nobody (one page per incident, at most
one incident paged per cooldown).

| from     | to       | trigger                                        | guard                        |
|----------|----------|------------------------------------------------|------------------------------|
| (none)   | pending  | finding, the rule has a for-duration           | no open alert with the key   |
| (none)   | firing   | finding / engine signal, no for-duration       | no open alert with the key   |
| pending  | firing   | finding again after the for-duration           | created_at <= now - for      |
| firing   | firing   | finding again, its message changed (a figure)  | message differs              |
| open     | resolved | the rule's evaluation no longer finds it       | state <> resolved            |
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection, transaction
from django.db.models.functions import Now

from scheduler.sqlfiles import named_statements

from .models import Alert, AlertRule, AlertSeverity, RuleKind

logger = logging.getLogger("sas.alerts")


@dataclass(frozen=True)
class Finding:
    """One subject for which a rule's condition holds now."""

    subject: str
    message: str
    run_ids: Sequence[str] = field(default_factory=tuple)


SQL_FILE = Path(__file__).resolve().parent / "sql" / "alerts.sql"


@cache
def queries() -> dict[str, str]:
    """The named statements of sql/alerts.sql, read once per process."""
    return named_statements(SQL_FILE)


def open_alerts_of_rule_sql() -> str:
    """The evaluator's read of a rule's open alerts, subject -> [state, message]: an expression
    of its rules query (a RawSQL annotation)."""
    return queries()["alert_open_of_rule"]


def announcements_due_sql() -> str:
    """Whether any announcement is due: an expression of the evaluator's rules query."""
    return queries()["alert_announcements_due"]


def alert_key(*, rule_id: int, subject: str) -> str:
    return f"{rule_id}:{subject}"


def _open(
    *,
    rule: AlertRule,
    hold: timedelta | None = None,
    subject: str,
    message: str,
    run_id: str | None,
    step_id: int | None,
    state: str,
    increment: int,
) -> tuple[int, int]:
    params: dict[str, Any] = {
        "rule_id": rule.pk,
        "run_id": run_id,
        "step_id": step_id,
        "kind": rule.kind,
        "severity": rule.severity,
        "subject": subject,
        "message": message,
        "state": state,
        "key": alert_key(rule_id=rule.pk, subject=subject),
        "for_duration": rule.for_duration if hold is None else hold,
        "increment": increment,
    }
    with connection.cursor() as cursor:
        cursor.execute(queries()["alert_open"], params)
        row = cursor.fetchone()
    return int(row[0]), int(row[1])


def _link(*, alert_id: int, run_ids: Sequence[str]) -> None:
    if not run_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(queries()["alert_link"], {"alert_id": alert_id, "run_ids": list(run_ids)})


def alert_raise(
    *,
    kind: str,
    subject: str,
    run_id: uuid.UUID | str,
    step_id: int | None,
    message: str,
) -> list[int]:
    """The engine's signal path: a step went to Error, a run needs an operator, a compensation
    keeps failing. For each enabled operator rule of `kind` whose target is empty or `subject`,
    open the rule's alert for `subject` firing at once - or count one more occurrence on the
    open one - and link `run_id` to it (every affected run, not only the first). Runs inside the
    caller's transaction: no alert for a change that rolls back. Returns the alerts' ids."""
    ids: list[int] = []
    rules = AlertRule.objects.filter(kind=kind, enabled=True, owner__isnull=True).filter(
        target__in=("", subject)
    )
    for rule in rules:
        alert_id, count = _open(
            rule=rule,
            subject=subject,
            message=message,
            run_id=str(run_id),
            step_id=step_id,
            state="firing",
            increment=1,
        )
        _link(alert_id=alert_id, run_ids=[str(run_id)])
        ids.append(alert_id)
        if count == 1:
            logger.error("ALERT %s (%s) run=%s step=%s: %s", rule.name, subject, run_id, step_id, message)
        else:
            logger.warning(
                "ALERT %s again (%d times, %s) run=%s: %s", rule.name, count, subject, run_id, message
            )
    return ids


@dataclass(frozen=True)
class Observation:
    """One rule's evaluation in a tick: what its condition found now, and its open alerts
    (subject -> state) as the caller read them before. `hold`: the for-duration in force, if
    not the rule's (a circuit "open longer than N")."""

    rule: AlertRule
    findings: Sequence[Finding]
    open_now: Mapping[str, str]
    hold: timedelta | None = None
    # The open alerts' messages (subject -> message): a firing alert whose finding now reads
    # differently ("2 of 2 runs failed" become "3 of 5") is given the current one.
    open_messages: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    open_alerts: int  # subjects found, over every rule
    changed: bool  # an alert was opened, advanced, reopened or resolved: announcements may be due


def alerts_observe(*, observations: Sequence[Observation]) -> Observed:
    """The evaluator's path, for every rule evaluated in a tick, set-based: open (pending, or
    firing when the rule has no for-duration), advance pending -> firing after the for-duration,
    link the affected runs, give a firing alert its finding's current message, and resolve each
    rule's open alerts that are no longer found. At most four statements - opens, links,
    messages, resolutions - each run only when needed: an alert already firing for a finding
    whose message is unchanged is left as is, so the steady state of an incident costs the links
    statement alone (it links only runs not yet linked, and counts only alerts that gained runs)
    - and the messages statement when a figure moved. Idempotent: evaluating twice gives the
    same rows. More than one
    statement runs in one transaction (the caller's, if it has one); a rule that could not be
    evaluated must not be passed (its alerts stay as they are)."""
    opens: list[tuple[AlertRule, Finding, timedelta]] = []
    link_keys: list[str] = []
    link_runs: list[str] = []
    resolve_rules: dict[int, str] = {}
    found_keys: list[str] = []
    reworded: dict[str, str] = {}  # key -> the firing alert's current message
    open_alerts = 0
    for o in observations:
        hold = o.rule.for_duration if o.hold is None else o.hold
        by_subject = {f.subject: f for f in o.findings}  # one incident per subject
        for finding in by_subject.values():
            key = alert_key(rule_id=o.rule.pk, subject=finding.subject)
            if o.open_now.get(finding.subject) != "firing":
                opens.append((o.rule, finding, hold))
            elif o.open_messages.get(finding.subject, finding.message) != finding.message:
                reworded[key] = finding.message
            link_keys += [key] * len(finding.run_ids)
            link_runs += [str(run_id) for run_id in finding.run_ids]
        if set(o.open_now) - set(by_subject):
            resolve_rules[o.rule.pk] = o.rule.name
            found_keys += [alert_key(rule_id=o.rule.pk, subject=s) for s in by_subject]
        open_alerts += len(by_subject)
    statements = bool(opens) + bool(link_runs) + bool(reworded) + bool(resolve_rules)
    if not statements:
        return Observed(open_alerts=open_alerts, changed=False)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        if opens:
            cursor.execute(queries()["alert_open_many"], _open_many_params(opens))
        if link_runs:
            cursor.execute(queries()["alert_link_many"], {"keys": link_keys, "runs": link_runs})
        if reworded:
            params = {"keys": list(reworded), "messages": list(reworded.values())}
            cursor.execute(queries()["alert_message_update"], params)
        resolved: list[tuple[int, int]] = []
        if resolve_rules:
            cursor.execute(queries()["alert_resolve"], {"rule_ids": list(resolve_rules), "keys": found_keys})
            resolved = cursor.fetchall()
    for alert_id, rule_id in resolved:
        logger.warning("ALERT resolved: rule %s alert %s", resolve_rules[rule_id], alert_id)
    return Observed(open_alerts=open_alerts, changed=bool(opens or resolved))


def _open_many_params(opens: Sequence[tuple[AlertRule, Finding, timedelta]]) -> dict[str, Any]:
    return {
        "keys": [alert_key(rule_id=r.pk, subject=f.subject) for r, f, _ in opens],
        "rule_ids": [r.pk for r, _, _ in opens],
        "kinds": [r.kind for r, _, _ in opens],
        "severities": [r.severity for r, _, _ in opens],
        "subjects": [f.subject for _, f, _ in opens],
        "messages": [f.message for _, f, _ in opens],
        "states": ["firing" if hold <= timedelta(0) else "pending" for _, _, hold in opens],
        "run_ids": [str(f.run_ids[0]) if f.run_ids else None for _, f, _ in opens],
        "holds": [hold for _, _, hold in opens],
    }


def alert_announcements_claim(*, limit: int) -> list[tuple[int, str]]:
    """Claim up to `limit` alert state changes to announce: (alert id, state firing/resolved).
    The claim is the announcement's record; call in the transaction that enqueues the
    deliveries (on commit), so a rolled-back tick announces nothing and loses nothing."""
    with connection.cursor() as cursor:
        cursor.execute(queries()["alert_announce"], {"limit": limit})
        return [(int(i), str(s)) for i, s in cursor.fetchall()]


def alert_acknowledge(*, alert_ids: Iterable[int], user: AbstractBaseUser) -> int:
    """Mark the given alerts acknowledged by `user`, now (database clock).

    Invariant: an alert is acknowledged once. The update is conditional on `acknowledged_at IS
    NULL`, so the first operator's time and name stay when two acknowledge at once or one clicks
    twice; already-acknowledged alerts are left alone. Acknowledging changes no run or step: it
    only says a person has seen the alert. Returns how many alerts this call acknowledged.
    Transaction: one UPDATE statement (autocommit, or the caller's transaction).
    """
    ids = list(alert_ids)
    updated = Alert.objects.filter(pk__in=ids, acknowledged_at__isnull=True).update(
        acknowledged_at=Now(), acknowledged_by_id=user.pk
    )
    if updated:
        logger.info("%d alert(s) acknowledged by %s", updated, user.get_username())
    return updated


__all__ = [
    "AlertSeverity",
    "Finding",
    "Observation",
    "Observed",
    "RuleKind",
    "alert_acknowledge",
    "alert_announcements_claim",
    "alert_raise",
    "alerts_observe",
]

"""Alert transitions: raise (open or count), observe (the evaluator's findings for one rule),
resolve, and claim announcements. One SQL statement per transition; the alerting app decides
when to call them and how to deliver (alerting/services.py).

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
| open     | resolved | the rule's evaluation no longer finds it       | state <> resolved            |
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection, transaction

from .models import AlertRule, AlertSeverity, RuleKind

logger = logging.getLogger("sas.alerts")


@dataclass(frozen=True)
class Finding:
    """One subject for which a rule's condition holds now."""

    subject: str
    message: str
    run_ids: Sequence[str] = field(default_factory=tuple)


# Insert a new incident, or count on the open one of the key. Conflict target: the partial
# unique index alert_open_key_unique.
_OPEN_SQL = """
INSERT INTO supervisor_alert (rule_id, run_id, step_id, kind, severity, subject, message, state, key,
                              count, created_at, fired_at, last_seen_at, announced_state)
VALUES (%(rule_id)s, %(run_id)s, %(step_id)s, %(kind)s, %(severity)s, %(subject)s, %(message)s,
        %(state)s, %(key)s, 1, statement_timestamp(),
        CASE WHEN %(state)s = 'firing' THEN statement_timestamp() END, statement_timestamp(), '')
ON CONFLICT (key) WHERE state <> 'resolved'
DO UPDATE SET last_seen_at = statement_timestamp(), message = EXCLUDED.message,
              count = supervisor_alert.count + %(increment)s,
              state = CASE WHEN supervisor_alert.state = 'pending'
                            AND supervisor_alert.created_at <= statement_timestamp() - %(for_duration)s
                           THEN 'firing' ELSE supervisor_alert.state END,
              fired_at = CASE WHEN supervisor_alert.state = 'pending'
                               AND supervisor_alert.created_at <= statement_timestamp() - %(for_duration)s
                              THEN statement_timestamp() ELSE supervisor_alert.fired_at END
RETURNING id, count
"""

# Link the runs (each once) and count the runs linked as the occurrences.
_LINK_SQL = """
WITH linked AS (
    INSERT INTO supervisor_alertrun (alert_id, run_id, linked_at)
    SELECT %(alert_id)s, r.id, statement_timestamp()
      FROM scheduler_run r WHERE r.id = ANY(%(run_ids)s::uuid[])
    ON CONFLICT (alert_id, run_id) DO NOTHING
    RETURNING 1
)
UPDATE supervisor_alert
   -- The CTE's rows are not visible to the subquery (one snapshot): add them.
   SET count = GREATEST(count, (SELECT count(*) FROM supervisor_alertrun WHERE alert_id = %(alert_id)s)
                               + (SELECT count(*) FROM linked)),
       run_id = COALESCE(run_id, (%(run_ids)s::uuid[])[1])
 WHERE id = %(alert_id)s
"""

# The evaluator's links, every finding of one rule in one statement: the runs not yet linked to
# the open alert of their key are linked, and only alerts that gained runs are counted again.
_LINK_MANY_SQL = """
WITH pairs AS (
    SELECT a.id AS alert_id, p.run_id
      FROM unnest(%(keys)s::text[], %(runs)s::uuid[]) AS p(key, run_id)
      JOIN supervisor_alert a ON a.key = p.key AND a.state <> 'resolved'
      JOIN scheduler_run r ON r.id = p.run_id
), linked AS (
    INSERT INTO supervisor_alertrun (alert_id, run_id, linked_at)
    SELECT alert_id, run_id, statement_timestamp() FROM pairs
    ON CONFLICT (alert_id, run_id) DO NOTHING
    RETURNING alert_id, run_id
), gained AS (
    SELECT alert_id, count(*) AS n, (array_agg(run_id))[1] AS first_run FROM linked GROUP BY alert_id
)
UPDATE supervisor_alert a
   SET count = GREATEST(a.count, (SELECT count(*) FROM supervisor_alertrun l WHERE l.alert_id = a.id) + g.n),
       run_id = COALESCE(a.run_id, g.first_run)
  FROM gained g
 WHERE a.id = g.alert_id
"""

# The evaluator's opens, every new or pending finding of a tick in one statement: the set-based
# form of _OPEN_SQL (insert a new incident, else - open already - advance pending -> firing after
# the finding's for-duration). Keys are unique in the batch (ON CONFLICT may not touch a row twice).
_OPEN_MANY_SQL = """
WITH f AS (
    SELECT * FROM unnest(%(keys)s::text[], %(rule_ids)s::bigint[], %(kinds)s::text[], %(severities)s::text[],
                         %(subjects)s::text[], %(messages)s::text[], %(states)s::text[], %(run_ids)s::uuid[],
                         %(holds)s::interval[])
           AS f(key, rule_id, kind, severity, subject, message, state, run_id, hold)
)
INSERT INTO supervisor_alert (rule_id, run_id, step_id, kind, severity, subject, message, state, key,
                              count, created_at, fired_at, last_seen_at, announced_state)
SELECT f.rule_id, f.run_id, NULL, f.kind, f.severity, f.subject, f.message, f.state, f.key, 1,
       statement_timestamp(), CASE WHEN f.state = 'firing' THEN statement_timestamp() END,
       statement_timestamp(), ''
  FROM f
ON CONFLICT (key) WHERE state <> 'resolved'
DO UPDATE SET last_seen_at = statement_timestamp(), message = EXCLUDED.message,
              state = CASE WHEN supervisor_alert.state = 'pending' AND supervisor_alert.created_at
                                <= statement_timestamp() - (SELECT hold FROM f WHERE f.key = EXCLUDED.key)
                           THEN 'firing' ELSE supervisor_alert.state END,
              fired_at = CASE WHEN supervisor_alert.state = 'pending' AND supervisor_alert.created_at
                                   <= statement_timestamp() - (SELECT hold FROM f WHERE f.key = EXCLUDED.key)
                              THEN statement_timestamp() ELSE supervisor_alert.fired_at END
"""

# Open alerts of the given rules no longer found: resolved. One never announced (pending, or
# firing but its first page held by the cooldown) is marked announced as resolved: nobody was
# told it began, nobody is told it ended.
_RESOLVE_SQL = """
UPDATE supervisor_alert
   SET resolved_at = statement_timestamp(),
       announced_state = CASE WHEN state = 'pending' OR announced_state = '' THEN 'resolved'
                              ELSE announced_state END,
       state = 'resolved'
 WHERE rule_id = ANY(%(rule_ids)s::bigint[]) AND state <> 'resolved' AND NOT (key = ANY(%(keys)s::text[]))
RETURNING id, rule_id
"""

# The announcement outbox: alerts whose state has not been announced; an incident's firing only
# when no alert of its key (this one or an earlier incident's) was announced within the rule's
# cooldown (alert_key_resolved_idx: by key); resolutions at once. Claimed by the UPDATE itself,
# so two evaluators never announce one change twice.
_ANNOUNCE_DUE = """
SELECT u.id FROM supervisor_alert u
  JOIN supervisor_alertrule ur ON ur.id = u.rule_id
 WHERE u.state <> u.announced_state AND u.state <> 'pending'
   AND (u.state = 'resolved'
        OR NOT EXISTS (SELECT 1 FROM supervisor_alert p
                        WHERE p.key = u.key AND p.announced_at > statement_timestamp() - ur.cooldown))
"""
_ANNOUNCE_SQL = (
    """
UPDATE supervisor_alert a
   SET announced_state = a.state, announced_at = statement_timestamp()
  FROM supervisor_alertrule r
 WHERE a.id IN ("""
    + _ANNOUNCE_DUE
    + """
         ORDER BY u.id LIMIT %(limit)s
         FOR UPDATE OF u SKIP LOCKED)
   AND r.id = a.rule_id
RETURNING a.id, a.state
"""
)

# The evaluator's read of the alert state, as annotations of its rules query: each rule's open
# alerts, subject -> state (alert_open_rule_idx), and whether any announcement is due (one probe
# of alert_unannounced_idx, evaluated once) - so a tick with nothing to announce claims nothing.
OPEN_ALERTS_OF_RULE_SQL = """
SELECT COALESCE(jsonb_object_agg(a.subject, a.state), '{}'::jsonb) FROM supervisor_alert a
 WHERE a.rule_id = supervisor_alertrule.id AND a.state <> 'resolved'
"""
ANNOUNCEMENTS_DUE_SQL = "EXISTS (" + _ANNOUNCE_DUE + ")"


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
        cursor.execute(_OPEN_SQL, params)
        row = cursor.fetchone()
    return int(row[0]), int(row[1])


def _link(*, alert_id: int, run_ids: Sequence[str]) -> None:
    if not run_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(_LINK_SQL, {"alert_id": alert_id, "run_ids": list(run_ids)})


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


@dataclass(frozen=True)
class Observed:
    open_alerts: int  # subjects found, over every rule
    changed: bool  # an alert was opened, advanced, reopened or resolved: announcements may be due


def alerts_observe(*, observations: Sequence[Observation]) -> Observed:
    """The evaluator's path, for every rule evaluated in a tick, set-based: open (pending, or
    firing when the rule has no for-duration), advance pending -> firing after the for-duration,
    link the affected runs, and resolve each rule's open alerts that
    are no longer found. At most three statements - opens, links, resolutions - each run only
    when needed: an alert already firing for a finding is left as is, so the steady state of an
    incident costs the links statement alone (it links only runs not yet linked, and counts only
    alerts that gained runs). Idempotent: evaluating twice gives the same rows. More than one
    statement runs in one transaction (the caller's, if it has one); a rule that could not be
    evaluated must not be passed (its alerts stay as they are)."""
    opens: list[tuple[AlertRule, Finding, timedelta]] = []
    link_keys: list[str] = []
    link_runs: list[str] = []
    resolve_rules: dict[int, str] = {}
    found_keys: list[str] = []
    open_alerts = 0
    for o in observations:
        hold = o.rule.for_duration if o.hold is None else o.hold
        by_subject = {f.subject: f for f in o.findings}  # one incident per subject
        for finding in by_subject.values():
            key = alert_key(rule_id=o.rule.pk, subject=finding.subject)
            if o.open_now.get(finding.subject) != "firing":
                opens.append((o.rule, finding, hold))
            link_keys += [key] * len(finding.run_ids)
            link_runs += [str(run_id) for run_id in finding.run_ids]
        if set(o.open_now) - set(by_subject):
            resolve_rules[o.rule.pk] = o.rule.name
            found_keys += [alert_key(rule_id=o.rule.pk, subject=s) for s in by_subject]
        open_alerts += len(by_subject)
    statements = bool(opens) + bool(link_runs) + bool(resolve_rules)
    if not statements:
        return Observed(open_alerts=open_alerts, changed=False)
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        if opens:
            cursor.execute(_OPEN_MANY_SQL, _open_many_params(opens))
        if link_runs:
            cursor.execute(_LINK_MANY_SQL, {"keys": link_keys, "runs": link_runs})
        resolved: list[tuple[int, int]] = []
        if resolve_rules:
            cursor.execute(_RESOLVE_SQL, {"rule_ids": list(resolve_rules), "keys": found_keys})
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
        cursor.execute(_ANNOUNCE_SQL, {"limit": limit})
        return [(int(i), str(s)) for i, s in cursor.fetchall()]


__all__ = [
    "AlertSeverity",
    "Finding",
    "Observation",
    "Observed",
    "RuleKind",
    "alert_announcements_claim",
    "alert_raise",
    "alerts_observe",
]

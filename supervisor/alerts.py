"""Alert transitions: raise (open or count), observe (the evaluator's findings for one rule),
resolve, and claim announcements. One SQL statement per transition; the alerting app decides
when to call them and how to deliver (alerting/services.py).

States: pending -> firing -> resolved (and pending -> resolved silently when the condition
clears before its for-duration). A resolved incident of the same key that comes back within
the rule's cooldown is reopened (same row, count goes on) instead of paging again.

| from     | to       | trigger                                        | guard                        |
|----------|----------|------------------------------------------------|------------------------------|
| (none)   | pending  | finding, the rule has a for-duration           | no open alert with the key   |
| (none)   | firing   | finding / engine signal, no for-duration       | no open alert with the key   |
| resolved | firing   | finding within the cooldown of its resolution  | resolved_at > now - cooldown |
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

from django.db import connection

from .models import Alert, AlertRule, AlertSeverity, RuleKind

logger = logging.getLogger("sas.alerts")


@dataclass(frozen=True)
class Finding:
    """One subject for which a rule's condition holds now."""

    subject: str
    message: str
    run_ids: Sequence[str] = field(default_factory=tuple)


# Reopen the latest incident of the key if it was resolved within the cooldown (flapping is
# one alert), else insert a new one; on an open one, count. Conflict target: the partial
# unique index alert_open_key_unique.
_OPEN_SQL = """
WITH reopened AS (
    UPDATE supervisor_alert a
       SET state = 'firing', resolved_at = NULL, last_seen_at = statement_timestamp(), count = a.count + 1,
           fired_at = COALESCE(a.fired_at, statement_timestamp()), message = %(message)s
     WHERE a.id = (SELECT id FROM supervisor_alert
                    WHERE key = %(key)s AND state = 'resolved'
                      AND resolved_at > statement_timestamp() - %(cooldown)s
                    ORDER BY resolved_at DESC LIMIT 1)
       AND NOT EXISTS (SELECT 1 FROM supervisor_alert o WHERE o.key = %(key)s AND o.state <> 'resolved')
    RETURNING a.id
)
INSERT INTO supervisor_alert (rule_id, run_id, step_id, kind, severity, subject, message, state, key,
                              count, created_at, fired_at, last_seen_at, announced_state)
SELECT %(rule_id)s, %(run_id)s, %(step_id)s, %(kind)s, %(severity)s, %(subject)s, %(message)s,
       %(state)s, %(key)s, 1, statement_timestamp(),
       CASE WHEN %(state)s = 'firing' THEN statement_timestamp() END, statement_timestamp(), ''
 WHERE NOT EXISTS (SELECT 1 FROM reopened)
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

# Open alerts of one rule no longer found: resolved. A pending one was never announced, so it
# is marked announced as resolved (nobody hears of it).
_RESOLVE_SQL = """
UPDATE supervisor_alert
   SET resolved_at = statement_timestamp(),
       announced_state = CASE WHEN state = 'pending' THEN 'resolved' ELSE announced_state END,
       state = 'resolved'
 WHERE rule_id = %(rule_id)s AND state <> 'resolved' AND NOT (key = ANY(%(keys)s))
RETURNING id
"""

# The announcement outbox: alerts whose state has not been announced, the first announcement
# of a key (or a re-announcement of a reopened one) only after the rule's cooldown; resolutions
# at once. Claimed by the UPDATE itself, so two evaluators never announce one change twice.
_ANNOUNCE_SQL = """
UPDATE supervisor_alert a
   SET announced_state = a.state, announced_at = statement_timestamp()
  FROM supervisor_alertrule r
 WHERE a.id IN (
        SELECT u.id FROM supervisor_alert u
          JOIN supervisor_alertrule ur ON ur.id = u.rule_id
         WHERE u.state <> u.announced_state AND u.state <> 'pending'
           AND (u.state = 'resolved' OR u.announced_at IS NULL
                OR u.announced_at <= statement_timestamp() - ur.cooldown)
         ORDER BY u.id LIMIT %(limit)s
         FOR UPDATE OF u SKIP LOCKED)
   AND r.id = a.rule_id
RETURNING a.id, a.state
"""


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
        "cooldown": rule.cooldown,
        "for_duration": rule.for_duration if hold is None else hold,
        "increment": increment,
    }
    with connection.cursor() as cursor:
        cursor.execute(_OPEN_SQL, params)
        row = cursor.fetchone()
        if row is None:  # reopened: read it back
            cursor.execute(
                "SELECT id, count FROM supervisor_alert WHERE key = %s AND state <> 'resolved'",
                [alert_key(rule_id=rule.pk, subject=subject)],
            )
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


def alert_observe(
    *,
    rule: AlertRule,
    findings: Sequence[Finding],
    for_duration: timedelta | None = None,
    open_now: Mapping[str, str] | None = None,
) -> int:
    """The evaluator's path, for one rule: open (pending, or firing when the rule has no
    for-duration), advance pending -> firing after the for-duration, link the affected runs,
    and resolve the rule's open alerts that are no longer found. Idempotent: evaluating twice
    gives the same rows. `open_now`: the rule's open alerts, subject -> state, as the caller
    read them (one query for every rule); an alert already firing for a finding is left as is
    (no write: the steady state of an incident costs one statement, the links). `for_duration`:
    instead of the rule's (a circuit "open longer than N"). Call inside one transaction per
    rule. Returns how many of its alerts are open."""
    hold = rule.for_duration if for_duration is None else for_duration
    state = "firing" if hold <= timedelta(0) else "pending"
    if open_now is None:
        open_now = dict(
            Alert.objects.filter(rule=rule).exclude(state="resolved").values_list("subject", "state")
        )
    for finding in findings:
        if open_now.get(finding.subject) == "firing":
            continue
        _open(
            rule=rule,
            subject=finding.subject,
            message=finding.message,
            run_id=finding.run_ids[0] if finding.run_ids else None,
            step_id=None,
            state=state,
            hold=hold,
            increment=0,
        )
    keys = [alert_key(rule_id=rule.pk, subject=f.subject) for f in findings for _ in f.run_ids]
    runs = [str(run_id) for f in findings for run_id in f.run_ids]
    if runs:
        with connection.cursor() as cursor:
            cursor.execute(_LINK_MANY_SQL, {"keys": keys, "runs": runs})
    found = {f.subject for f in findings}
    if set(open_now) - found:
        with connection.cursor() as cursor:
            cursor.execute(
                _RESOLVE_SQL,
                {"rule_id": rule.pk, "keys": [alert_key(rule_id=rule.pk, subject=s) for s in found]},
            )
            for (resolved_id,) in cursor.fetchall():
                logger.warning("ALERT resolved: rule %s alert %s", rule.name, resolved_id)
    return len(found)


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
    "RuleKind",
    "alert_announcements_claim",
    "alert_observe",
    "alert_raise",
]

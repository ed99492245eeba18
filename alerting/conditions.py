"""The rule kinds' conditions evaluated (the kinds themselves: alerting/failure_conditions.py for
runs, jobs, steps and services failing, alerting/platform_conditions.py for the platform's
liveness; their sentences: alerting/words.py), a kind at a time: every enabled rule of one kind in one
bounded, index-backed statement (or, for breakers and queues, one Redis pipeline). Each kind
takes the rules of its kind and returns, per rule id, the subjects for which the rule holds now
(`Finding`s). No Python loop over history.

A tick sends every kind's statement at once (`conditions_evaluate`: psycopg's pipeline mode, one
flush) and reads Redis while PostgreSQL works, so the conditions cost one round trip, not one
per kind or per rule (issue 21's benchmark: bench/alerts.py, plans and figures in
bench/README.md, "Alerting"). A statement that fails aborts the rest of the pipeline: the kinds
are then read again one statement each, so only the failing kind is skipped (logged).

How a batch stays index-backed: the rules travel as parallel arrays (`unnest`), and each rule's
condition is a LATERAL subquery that cannot be flattened (it aggregates), so it runs once per
rule as its own index range scan, parameterised by the rule's window - the same rows a
statement per rule read. A window that is a per-rule parameter is one the planner cannot
estimate (it assumes a third of the table), so every windowed scan also carries the batch's
widest window as a constant: the planner sizes the range from it, and chooses the index.

Which index serves what:
- failure rates of workflows and every job, runs needing an operator, the jobs seen by a
  consecutive-failures rule on every job: run_state_created_idx (state, created_at) - one range
  per terminal state;
- one job's failure rate and its last N runs: run_job_created_idx (job, created_at);
- a remote service's failure rate: history_attempt_started_idx (started_at) WHERE attempt;
- a step in Error: step_error_finished_idx (finished_at) WHERE Error;
- steps overdue: step_processing_deadline_idx; missed runs, dispatch lag and due backlog:
  scheduledjob_due_idx (next_execution_at) - the due rows only, the backlog counted up to the
  largest threshold + 1.
Rule-independent reads (overdue steps, the due backlog, struggling compensations) run once per
kind, whatever the number of rules; each rule compares its own threshold or target.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection, transaction

from alerting.models import RuleKind
from liveness.queues import BrokerUnreadable

from .condition_kit import Found, Rules, Statement
from .failure_conditions import FAILURE_STATEMENTS
from .platform_conditions import PLATFORM_STATEMENTS, REDIS_CONDITIONS

logger = logging.getLogger("sas.alerts")

# The database kinds (what bench/alerts.py EXPLAINs: the statements themselves, not copies).
STATEMENTS: dict[str, Statement] = {**FAILURE_STATEMENTS, **PLATFORM_STATEMENTS}
# Every kind, each alone (one round trip or pipeline): what the pipeline falls back to.
CONDITIONS: dict[str, Callable[[Rules], Found]] = {
    **{kind: statement.run for kind, statement in STATEMENTS.items()},
    **REDIS_CONDITIONS,
}
# What a condition's read may raise: the kind (or the rule) is skipped and logged, the tick goes on.
_ERRORS = (DatabaseError, redis.RedisError, OSError, BrokerUnreadable)
# JIT off for the pipeline's statements (the first and last of the flush: no round trip of its
# own). A per-rule window is estimated at a third of the table, so a batch's cost passes
# jit_above_cost and PostgreSQL compiled each statement, every tick (they are not prepared):
# 30-70 ms of compiling for well under a millisecond of index range scans (bench/README.md).
# Transaction-scoped (set_config's `true`, SET LOCAL): the pipeline is one implicit transaction
# until its sync, inside a caller's transaction until that ends; so nothing is left on the server
# connection, which behind a transaction-mode pooler the next client gets (issue 29 item 4).
JIT_OFF_SQL = "SELECT set_config('jit', 'off', true)"


# The kinds a clean restart trips on its own: the periodic tasks' last runs are as old as the
# downtime until beat's first sends complete, and work queued meanwhile waits until the workers
# are up. For SAS_ALERT_STARTUP_GRACE seconds after the evaluator's process started they are not
# evaluated - their alerts stay as they are (an incident open before the restart is neither
# resolved nor paged again) - docs/decisions.md, "A clean restart pages nobody".
STARTUP_GRACE_KINDS = frozenset({RuleKind.PERIODIC_NOT_RUN, RuleKind.QUEUE_NO_CONSUMER})
# When this process loaded the evaluator: a worker's main process at start-up (its prefork
# children, forked from it, and its watchdog thread inherit it).
PROCESS_STARTED = time.time()


def startup_grace_kinds() -> frozenset[str]:
    """The kinds left out of this tick: the grace kinds while the process is younger than
    SAS_ALERT_STARTUP_GRACE seconds, none after."""
    if time.time() - PROCESS_STARTED < float(settings.SAS_ALERT_STARTUP_GRACE):
        return STARTUP_GRACE_KINDS
    return frozenset()


def conditions_evaluate(by_kind: Mapping[str, Rules]) -> Found:
    """Every rule's findings, keyed by rule id; a rule whose condition could not be read (a
    Redis or database error) is missing, and logged - the caller leaves its alerts as they are.
    The database kinds' statements go in one pipeline (one flush, run back to back by the
    server) and the Redis kinds are read meanwhile. A failed statement aborts the ones after it
    in the pipeline: the kinds are then read again one statement each, and a kind that fails
    alone, one rule at a time - so one bad rule costs its own evaluation, not its kind's. Inside
    a caller's transaction, each of these reads is a savepoint (a failed statement must not
    abort the caller's transaction); outside one, none is needed. The kinds in their start-up
    grace (`startup_grace_kinds`) are not read: their rules are missing too."""
    found: Found = {}
    waiting = startup_grace_kinds()
    by_kind = {kind: rules for kind, rules in by_kind.items() if kind not in waiting}
    sent = [kind for kind in by_kind if kind in STATEMENTS]
    try:
        connection.ensure_connection()
        with _savepoint(), connection.wrap_database_errors, connection.connection.pipeline():
            cursors = []
            with connection.cursor() as cursor:
                cursor.execute(JIT_OFF_SQL)
            for kind in sent:
                cursor = connection.cursor()
                cursor.execute(STATEMENTS[kind].sql, STATEMENTS[kind].params(by_kind[kind]))
                cursors.append((kind, cursor))
            for kind in by_kind:
                if kind not in STATEMENTS:
                    _kind_read(kind, by_kind[kind], found)  # Redis, while PostgreSQL works
        rows = {kind: cursor.fetchall() for kind, cursor in cursors}
    except DatabaseError:
        logger.warning("alert conditions: the pipeline failed; reading each kind alone", exc_info=True)
        for kind in sent:
            _kind_read(kind, by_kind[kind], found)
        return found
    for kind in sent:
        try:
            found.update(STATEMENTS[kind].findings(by_kind[kind], rows[kind]))
        except _ERRORS:
            logger.exception("alert rules of kind %s could not be evaluated; next tick retries", kind)
    return found


def _savepoint() -> AbstractContextManager[Any]:
    return transaction.atomic() if connection.in_atomic_block else nullcontext()


def _kind_read(kind: str, rules: Rules, found: Found) -> None:
    try:
        with _savepoint():
            found.update(CONDITIONS[kind](rules))
        return
    except _ERRORS:
        if len(rules) == 1:
            logger.exception(
                "alert rule %s (%s) could not be evaluated; next tick retries", rules[0].pk, kind
            )
            return
    for rule in rules:  # which rule of the kind is it?
        _kind_read(kind, [rule], found)

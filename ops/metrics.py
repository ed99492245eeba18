"""/metrics: the engine's state in the Prometheus text format, read at scrape time.

A custom prometheus_client Collector (no metric objects in process memory): every scrape reads
PostgreSQL (live runs and steps, due jobs, open alerts, finished runs), Redis (the counters and
histograms the engine's processes add to, liveness/counters.py; breakers; periodic tasks' last
runs; consumers' heartbeats) and the broker (queue depths). So any web process answers the same
figures whichever worker processes, on whichever hosts, did the work; docs/decisions.md,
"Metrics read at scrape time", says why this and not prometheus_client's multiprocess mode.

Every query is index-backed and bounded by the live work, not by the history
(bench/metrics_scrape.py times a scrape at 1,000,000 runs; its EXPLAIN plans are in
bench/README.md). Labels are bounded: workflow, step, operation, state, outcome, queue,
service, task - never a user, run, job or host.

Finished runs are counted once: `runs_finished_totals` keeps per-(workflow, state, job or not)
totals in Redis for the runs created before a cutoff (RUNS_SETTLE_SECONDS ago), remembers the
few of those still going and adds each when it ends, and counts only the runs created since
the cutoff at each scrape - a range of run_state_created_idx, however long the history.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import connection
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from alerting.models import AlertSeverity
from liveness import counters as engine_metrics
from liveness.last_run import last_run_key
from liveness.queues import queue_statuses
from ops.selectors import BREAKER_SERVICES, breaker_statuses, webhook_breaker_names
from sasproject.redis_client import get_redis
from scheduler.models import RUN_TERMINAL_STATES, RUN_UNFINISHED_STATES
from scheduler.workflows import get_workflow, registered_workflows
from webhooks.workflows import WEBHOOK_WORKFLOW

logger = logging.getLogger(__name__)

# A run is counted into the stored totals (or remembered, if still going) once it was created
# this long before the scrape: a run row is committed well within this of its created_at (a
# submission is one short transaction), so none is missed.
RUNS_SETTLE_SECONDS = 120.0

UNFINISHED = tuple(str(s) for s in RUN_UNFINISHED_STATES)
TERMINAL = tuple(str(s) for s in RUN_TERMINAL_STATES)

# -- the statements (one text each; EXPLAIN plans in bench/README.md) --------------------------
# Live runs by state and workflow: ranges of run_state_created_idx, one per unfinished state.
SQL_RUNS_LIVE = """
SELECT state, workflow, count(*) FROM scheduler_run
WHERE state = ANY(%(states)s) GROUP BY state, workflow
"""
# Runs still going created in [since, until) (remembered until they finish): ranges of
# run_state_created_idx per unfinished state.
SQL_RUNS_GOING_BETWEEN = """
SELECT id FROM scheduler_run
WHERE state = ANY(%(states)s) AND created_at >= %(since)s AND created_at < %(until)s
"""
# Which of the remembered runs have finished: primary key lookups.
SQL_RUNS_ENDED_AMONG = """
SELECT id, workflow, state, job_id IS NOT NULL FROM scheduler_run
WHERE id = ANY(%(ids)s::uuid[]) AND state = ANY(%(states)s)
"""
# Finished runs created in [since, until): ranges of run_state_created_idx per terminal state.
SQL_RUNS_FINISHED_BETWEEN = """
SELECT workflow, state, job_id IS NOT NULL, count(*) FROM scheduler_run
WHERE state = ANY(%(states)s) AND created_at >= %(since)s AND created_at < %(until)s
GROUP BY 1, 2, 3
"""
# Pending steps by operation: an index-only scan of step_pending_operation_idx (Pending rows
# only); due ones and the oldest due time in the same pass.
SQL_STEPS_PENDING = """
SELECT operation, count(*), count(*) FILTER (WHERE not_before <= now()), min(not_before)
FROM scheduler_step WHERE process_state = 'pending' GROUP BY operation
"""
# Waiting steps (behind the step before them, or a compensation behind the one after) by
# operation. Only an unfinished run has any (a run that ends cancels what still waits), so the
# runs come from ranges of run_state_created_idx and their steps from step_run_seq_unique:
# bounded by the runs in flight, however long the history.
SQL_STEPS_WAITING = """
SELECT s.operation, count(*) FROM scheduler_run r JOIN scheduler_step s ON s.run_id = r.id
WHERE r.state = ANY(%(states)s) AND s.process_state = 'waiting' GROUP BY s.operation
"""
# Processing steps by operation: step_processing_deadline_idx (Processing rows only).
SQL_STEPS_PROCESSING = """
SELECT operation, count(*) FROM scheduler_step WHERE process_state = 'processing' GROUP BY operation
"""
# Due job occurrences not fired yet and the oldest one: scheduledjob_due_idx.
SQL_JOBS_DUE = """
SELECT count(*), min(next_execution_at) FROM scheduler_scheduledjob
WHERE next_execution_at IS NOT NULL AND next_execution_at <= now()
"""
# Unacknowledged alerts: alert_open_idx.
# Open alerts (firing, nobody acknowledged them yet - the admin panel's "open") by severity,
# the platform's (an operator rule's, or raised by the engine: no rule) and customers' apart.
# Resolved and pending alerts are not open (alert_open_rule_idx: state <> 'resolved').
SQL_ALERTS_OPEN = """
SELECT a.severity, (r.owner_id IS NOT NULL) AS customer, count(*)
  FROM alerting_alert a LEFT JOIN alerting_alertrule r ON r.id = a.rule_id
 WHERE a.state <> 'resolved' AND a.state = 'firing' AND a.acknowledged_at IS NULL
 GROUP BY 1, 2
"""
# Enabled alert rules (alertrule_enabled_kind_idx): those past SAS_ALERT_MAX_RULES are not evaluated.
SQL_ALERT_RULES_ENABLED = "SELECT count(*) FROM alerting_alertrule WHERE enabled"


def _rows(sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or {})
        return list(cursor.fetchall())


def _runs_key() -> str:
    return f"{settings.REDIS_PREFIX}sas:metrics:runs_finished"


def _decode(raw: dict[Any, Any]) -> dict[str, str]:
    return {
        (k.decode() if isinstance(k, bytes) else str(k)): (v.decode() if isinstance(v, bytes) else str(v))
        for k, v in raw.items()
    }


def _runs_finished_advance(now: float) -> None:
    """Move the stored totals' cutoff forward to now - RUNS_SETTLE_SECONDS: add the runs
    created in between that have finished, remember the ids of those still going (a Redis set;
    only runs older than the settle time - long or stuck ones - so it stays small) and add
    each remembered run once it has finished. One scrape at a time (a Redis lock); the totals,
    the set and the cutoff change in one MULTI, so a concurrent scrape reads either the old
    state or the new one, never a run counted twice or not at all."""
    from datetime import UTC, datetime

    client = get_redis()
    key = _runs_key()
    going_key = f"{key}:going"
    lock = f"{key}:lock"
    if not client.set(lock, "1", nx=True, px=30_000):
        return
    try:
        current = client.hget(key, "_cutoff")
        since = float(current) if current is not None else 0.0
        until = now - RUNS_SETTLE_SECONDS
        going = [m.decode() if isinstance(m, bytes) else str(m) for m in client.smembers(going_key)]
        ended = _rows(SQL_RUNS_ENDED_AMONG, {"ids": going, "states": list(TERMINAL)}) if going else []
        if until <= since and not ended:
            return
        rows: list[tuple[Any, ...]] = []
        still: list[str] = []
        if until > since:
            bounds = {
                "since": datetime.fromtimestamp(since, tz=UTC),
                "until": datetime.fromtimestamp(until, tz=UTC),
            }
            rows = _rows(SQL_RUNS_FINISHED_BETWEEN, {"states": list(TERMINAL), **bounds})
            still = [str(r[0]) for r in _rows(SQL_RUNS_GOING_BETWEEN, {"states": list(UNFINISHED), **bounds})]
        pipe = client.pipeline(transaction=True)
        for workflow, state, is_job, count in rows:
            pipe.hincrby(key, f"{workflow}|{state}|{int(bool(is_job))}", int(count))
        for run_id, workflow, state, is_job in ended:
            pipe.hincrby(key, f"{workflow}|{state}|{int(bool(is_job))}", 1)
            pipe.srem(going_key, str(run_id))
        if still:
            pipe.sadd(going_key, *still)
        if until > since:
            pipe.hset(key, "_cutoff", f"{until:.6f}")
        pipe.execute()
    finally:
        client.delete(lock)


def runs_finished_totals(now: float | None = None) -> dict[tuple[str, str, bool], int]:
    """Finished runs ever (since metrics began on this Redis) by (workflow, state, is a job's
    run): the stored totals up to the cutoff plus the runs created after it."""
    from datetime import UTC, datetime

    now = time.time() if now is None else now
    _runs_finished_advance(now)
    stored = _decode(get_redis().hgetall(_runs_key()))
    cutoff = float(stored.pop("_cutoff", "0") or 0)
    totals: dict[tuple[str, str, bool], int] = defaultdict(int)
    for field, value in stored.items():
        workflow, state, is_job = field.rsplit("|", 2)
        totals[(workflow, state, is_job == "1")] += int(value)
    rows = _rows(
        SQL_RUNS_FINISHED_BETWEEN,
        {
            "states": list(TERMINAL),
            "since": datetime.fromtimestamp(cutoff, tz=UTC),
            "until": datetime.fromtimestamp(now + 86400, tz=UTC),
        },
    )
    for workflow, state, is_job, count in rows:
        totals[(workflow, state, bool(is_job))] += int(count)
    return dict(totals)


def operation_steps() -> dict[str, list[tuple[str, str]]]:
    """operation -> [(workflow, step)] of the registered workflows (forward steps and their
    compensations), so that per-operation figures carry their workflow and step labels."""
    found: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for name in registered_workflows():
        for step in get_workflow(name).steps:
            found[step.operation].append((name, step.name))
            if step.compensation is not None:
                found[step.compensation.operation].append((name, step.compensation.name))
    return found


def _labels_of(operation: str, known: dict[str, list[tuple[str, str]]]) -> tuple[str, str]:
    """(workflow, step) of an operation: its one workflow step, or "*" when several workflows
    share it (the operation label still tells them apart), or "" when none is registered."""
    places = known.get(operation, [])
    if len(places) == 1:
        return places[0]
    if not places:
        return ("", "")
    workflows = {w for w, _ in places}
    steps = {s for _, s in places}
    return (workflows.pop() if len(workflows) == 1 else "*", steps.pop() if len(steps) == 1 else "*")


def _attempt_families(raw: dict[str, str]) -> list[Metric]:
    known = operation_steps()
    labels = ["workflow", "step", "operation"]
    attempts = CounterMetricFamily(
        "sas_step_attempts", "Agent attempts of a step by outcome.", labels=[*labels, "outcome"]
    )
    buckets: dict[str, dict[str, dict[int, int]]] = {"l": defaultdict(dict), "q": defaultdict(dict)}
    sums: dict[str, dict[str, float]] = {"l": {}, "q": {}}
    for field, value in sorted(raw.items()):
        kind, _, rest = field.partition("|")
        if kind == "o":
            operation, outcome = rest.rsplit("|", 1)
            attempts.add_metric([*_labels_of(operation, known), operation, outcome], float(value))
        elif kind in ("l", "q"):
            operation, index = rest.rsplit("|", 1)
            buckets[kind][operation][int(index)] = int(value)
        elif kind in ("ls", "qs"):
            sums[kind[0]][rest] = float(value)
    families: list[Metric] = [attempts]
    for kind, name, doc in (
        ("l", "sas_step_latency_seconds", "An agent attempt's time at work, from its start to its reply."),
        (
            "q",
            "sas_step_schedule_to_start_seconds",
            "An agent request's time in the queue, from its publish to its start (broker deliveries).",
        ),
    ):
        histogram = HistogramMetricFamily(name, doc, labels=labels)
        for operation, counts in sorted(buckets[kind].items()):
            cumulative, series = 0, []
            for i, bound in enumerate(engine_metrics.LATENCY_BUCKETS):
                cumulative += counts.get(i, 0)
                series.append((repr(bound), cumulative))
            cumulative += counts.get(len(engine_metrics.LATENCY_BUCKETS), 0)
            series.append(("+Inf", cumulative))
            histogram.add_metric(
                [*_labels_of(operation, known), operation], series, sum_value=sums[kind].get(operation, 0.0)
            )
        families.append(histogram)
    return families


class EngineCollector(Collector):
    """Collects the engine's figures at each scrape; see the module docstring."""

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        now = time.time()
        # Each part reads its own source; one that fails (Redis down, a query error) is left
        # out of this scrape and flagged, the others are still served.
        up = GaugeMetricFamily(
            "sas_metrics_section_up", "1 if this part of the scrape could be read.", labels=["section"]
        )
        sections = {
            "runs": lambda: self._runs(now),
            "steps": lambda: self._steps(now),
            "jobs": lambda: self._jobs(now),
            "engine_counters": self._engine_counters,
            "alerts_breakers": self._alerts_and_breakers,
            "queues": self._queues,
        }
        for name, read in sections.items():
            try:
                families = list(read())
            except Exception:
                logger.exception("metrics: cannot read %s", name)
                up.add_metric([name], 0.0)
                continue
            up.add_metric([name], 1.0)
            yield from families
        yield up
        yield GaugeMetricFamily(
            "sas_metrics_scrape_seconds",
            "How long this scrape's reads took.",
            value=time.monotonic() - started,
        )

    def _runs(self, now: float) -> Iterable[Metric]:
        live = GaugeMetricFamily(
            "sas_runs", "Runs still going, by state and workflow.", labels=["state", "workflow"]
        )
        seen = set()
        for state, workflow, count in _rows(SQL_RUNS_LIVE, {"states": list(UNFINISHED)}):
            live.add_metric([state, workflow], count)
            seen.add((state, workflow))
        for workflow in registered_workflows():
            for state in UNFINISHED:
                if (state, workflow) not in seen:
                    live.add_metric([state, workflow], 0)
        yield live
        finished = CounterMetricFamily(
            "sas_runs_finished", "Runs that ended, by workflow and final state.", labels=["workflow", "state"]
        )
        jobs = CounterMetricFamily(
            "sas_job_runs_finished",
            "Runs of jobs that ended, by workflow and final state (the job failure rate's inputs: "
            "failed + compensated over all).",
            labels=["workflow", "state"],
        )
        webhooks = CounterMetricFamily(
            "sas_webhook_deliveries", "Webhook deliveries that ended, by final state.", labels=["state"]
        )
        by_run: dict[tuple[str, str], int] = defaultdict(int)
        by_job: dict[tuple[str, str], int] = defaultdict(int)
        for (workflow, state, is_job), count in runs_finished_totals(now).items():
            by_run[(workflow, state)] += count
            if is_job:
                by_job[(workflow, state)] += count
        for workflow in registered_workflows():
            for state in TERMINAL:
                by_run.setdefault((workflow, state), 0)
        for (workflow, state), count in sorted(by_run.items()):
            finished.add_metric([workflow, state], count)
            if workflow == WEBHOOK_WORKFLOW:
                webhooks.add_metric([state], count)
        for (workflow, state), count in sorted(by_job.items()):
            jobs.add_metric([workflow, state], count)
        yield from (finished, jobs, webhooks)

    def _steps(self, now: float) -> Iterable[Metric]:
        steps = GaugeMetricFamily(
            "sas_steps",
            "Steps of runs in flight by state and operation: waiting (behind the step before "
            "them), pending (to be claimed: due or in backoff), processing (at an agent).",
            labels=["state", "operation"],
        )
        due = GaugeMetricFamily(
            "sas_steps_pending_due",
            "Pending steps whose time has come (not in backoff).",
            labels=["operation"],
        )
        backoff = GaugeMetricFamily(
            "sas_steps_pending_backoff",
            "Pending steps waiting out a backoff (not_before still ahead): after a failed or "
            "deferred attempt, or an open circuit breaker.",
            labels=["operation"],
        )
        oldest = None
        for operation, count, due_count, first in _rows(SQL_STEPS_PENDING):
            steps.add_metric(["pending", operation], count)
            due.add_metric([operation], due_count)
            backoff.add_metric([operation], count - due_count)
            if due_count and first is not None and (oldest is None or first < oldest):
                oldest = first
        for operation, count in _rows(SQL_STEPS_PROCESSING):
            steps.add_metric(["processing", operation], count)
        for operation, count in _rows(SQL_STEPS_WAITING, {"states": list(UNFINISHED)}):
            steps.add_metric(["waiting", operation], count)
        yield steps
        yield due
        yield backoff
        yield GaugeMetricFamily(
            "sas_step_oldest_pending_seconds",
            "How long the oldest due Pending step has waited to be claimed (0: none).",
            value=max(0.0, now - oldest.timestamp()) if oldest is not None else 0.0,
        )

    def _jobs(self, now: float) -> Iterable[Metric]:
        ((count, first),) = _rows(SQL_JOBS_DUE)
        yield GaugeMetricFamily(
            "sas_jobs_due_backlog", "Job occurrences due and not fired yet.", value=int(count or 0)
        )
        yield GaugeMetricFamily(
            "sas_jobs_dispatch_lag_seconds",
            "How late the oldest due, unfired job occurrence is (0: none due).",
            value=max(0.0, now - first.timestamp()) if first is not None else 0.0,
        )

    def _engine_counters(self) -> Iterable[Metric]:
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(engine_metrics.attempts_key())
        pipe.hgetall(engine_metrics.supervisor_key())
        pipe.hgetall(last_run_key())
        pipe.hgetall(engine_metrics.refused_key())
        attempts, supervisor, periodic, refused_counts = (_decode(raw) for raw in pipe.execute())
        yield from _attempt_families(attempts)
        refused = CounterMetricFamily(
            "sas_agent_requests_refused",
            "Agent requests dropped before any remote call: not_held (no step of that operation "
            "is Processing under the request's lease: forged, replayed, or its run cancelled), "
            "malformed.",
            labels=["operation", "reason"],
        )
        for field, value in sorted(refused_counts.items()):
            operation, _, reason = field.rpartition("|")
            refused.add_metric([operation, reason], float(value))
        yield refused
        recoveries = CounterMetricFamily(
            "sas_supervisor_recoveries",
            "Steps the supervisor's sweep took back: retried (deadline passed), requeued (never "
            "started), errored (out of attempts or time).",
            labels=["action"],
        )
        for action in ("retried", "requeued", "errored"):
            recoveries.add_metric([action], float(supervisor.get(action, 0)))
        yield recoveries
        last = GaugeMetricFamily(
            "sas_periodic_task_last_run_timestamp_seconds",
            "When each periodic engine task last completed, recorded at its success (epoch seconds).",
            labels=["task"],
        )
        for task, value in sorted(periodic.items()):
            last.add_metric([task], float(value))
        yield last

    def _alerts_and_breakers(self) -> Iterable[Metric]:
        opened = {(str(severity), bool(customer)): int(n) for severity, customer, n in _rows(SQL_ALERTS_OPEN)}
        open_alerts = GaugeMetricFamily(
            "sas_alerts_open",
            "Alerts firing and not acknowledged, by severity; scope: system (operator rules and the "
            "engine's own alerts) or customer (customers' rules on their jobs).",
            labels=["severity", "scope"],
        )
        for severity in AlertSeverity.values:
            for scope, customer in (("system", False), ("customer", True)):
                open_alerts.add_metric([severity, scope], opened.get((severity, customer), 0))
        yield open_alerts
        ((enabled_rules,),) = _rows(SQL_ALERT_RULES_ENABLED)
        yield GaugeMetricFamily(
            "sas_alert_rules_not_evaluated",
            "Enabled alert rules past SAS_ALERT_MAX_RULES, which the evaluator leaves out (issue 26).",
            value=max(0, int(enabled_rules) - settings.SAS_ALERT_MAX_RULES),
        )
        breaker = GaugeMetricFamily(
            "sas_breaker_state",
            "Circuit breaker of each remote service: 1 for its current state.",
            labels=["service", "state"],
        )
        for status in breaker_statuses(services=BREAKER_SERVICES):
            for state in ("closed", "open", "half_open", "unknown"):
                breaker.add_metric([status.service, state], 1.0 if status.state == state else 0.0)
        yield breaker
        # Webhook breakers are one per subscriber host: counted by state, never a host label.
        hosts = GaugeMetricFamily(
            "sas_webhook_breakers", "Webhook subscriber hosts' breakers by state.", labels=["state"]
        )
        counts: dict[str, int] = {"closed": 0, "open": 0, "half_open": 0, "unknown": 0}
        for status in breaker_statuses(services=tuple(webhook_breaker_names())):
            counts[status.state] = counts.get(status.state, 0) + 1
        for state, count in counts.items():
            hosts.add_metric([state], count)
        yield hosts

    def _queues(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily(
            "sas_queue_depth", "Messages waiting in each Celery queue.", labels=["queue"]
        )
        age = GaugeMetricFamily(
            "sas_queue_oldest_message_seconds",
            "Age of the oldest waiting message of each queue (Redis broker; 0 when empty).",
            labels=["queue"],
        )
        consumers = GaugeMetricFamily(
            "sas_queue_consumers", "Workers heard from in time that consume each queue.", labels=["queue"]
        )
        up = GaugeMetricFamily("sas_broker_up", "1 if the broker's queues could be read.")
        statuses = queue_statuses()
        up.add_metric([], 0.0 if any(s.depth is None for s in statuses) else 1.0)
        for status in statuses:
            if status.depth is not None:
                depth.add_metric([status.name], status.depth)
                age.add_metric([status.name], status.oldest_age or 0.0)
            consumers.add_metric([status.name], status.consumers)
        yield from (depth, age, consumers, up)

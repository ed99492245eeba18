"""The Scheduler: submit runs, claim due steps, dispatch them to agents, accept replies.

Every state transition here is one conditional UPDATE whose row count is the concurrency check
(`filter(pk=..., process_state=..., lease=...).update(...)`); time comes from the database clock
(`Now()`), never from a worker's. The database is the source of truth: a lost broker message, a
lost kick or a crashed scheduler leaves rows that the periodic tick or the supervisor finds again.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from celery import current_app
from celery.schedules import crontab
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import DurationField, F, Value
from django.db.models.functions import Now
from django.utils import timezone

from sasproject.redis_client import get_redis
from supervisor.alerts import alert_raise
from supervisor.models import Alert

from .models import Job, Run, RunEvent, Step, TaskExecutionHistory
from .signals import run_event, run_events
from .workflows import StepContext, StepDef, Workflow, WorkflowInputError, get_workflow

logger = logging.getLogger(__name__)

Outcome = Literal["success", "permanent", "transient"]
ReplyResult = Literal["accepted", "ignored"]

COMPENSATION_SEQ_BASE = 1000


def scheduler_instance_id() -> str:
    """Who claims: host and process. Stored in `locked_by`; tells operators which process held a step."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _after(seconds: float) -> Any:
    """`now() + seconds` on the database clock."""
    return Now() + Value(timedelta(seconds=seconds), output_field=DurationField())


def backoff_seconds(*, failure_count: int, base: float, cap: float) -> float:
    """Exponential backoff with "equal jitter": half fixed, half random, so retries spread out
    but never come back immediately. https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/"""
    exp = min(cap, base * (2 ** max(0, failure_count - 1)))
    return exp / 2 + random.uniform(0, exp / 2)


# ---------------------------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------------------------


def _event(run_id: uuid.UUID | str, type_: str, *, step: Step | None = None, **data: Any) -> RunEvent:
    if step is not None:
        data.setdefault("step", step.name)
    event = RunEvent.objects.create(run_id=run_id, type=type_, step=step, data=data)
    run_event.send(sender=RunEvent, event=event)
    return event


def events_record(events: list[RunEvent]) -> list[RunEvent]:
    """Record many events in one INSERT (a sweep's batch), then send `run_events` with all of
    them, in order, in the caller's transaction - as `_event` sends `run_event` for one."""
    created = RunEvent.objects.bulk_create(events)
    run_events.send(sender=RunEvent, events=created)
    return created


# ---------------------------------------------------------------------------------------------
# Submit
# ---------------------------------------------------------------------------------------------


def _step_context(run: Run, steps: list[Step]) -> StepContext:
    return StepContext(
        run_id=str(run.id),
        input=run.input,
        results={s.name: s.result for s in steps if s.result is not None},
        keys={s.name: s.idempotency_key for s in steps},
    )


def _new_step(run: Run, definition: StepDef, *, seq: int, kind: str, state: str) -> Step:
    return Step(
        run=run,
        name=definition.name,
        kind=kind,
        seq=seq,
        operation=definition.operation,
        process_state=state,
        idempotency_key=f"{run.id}:{definition.name}",
        timeout=timedelta(seconds=definition.timeout),
        max_failures=definition.max_failures,
        backoff_base=definition.backoff_base,
        backoff_max=definition.backoff_max,
        priority=run.priority,
        deadline=run.deadline,
        not_before=timezone.now(),
    )


def run_validate_input(*, workflow: str, input: Mapping[str, Any]) -> tuple[Workflow, dict[str, Any]]:
    """Clean `input` for `workflow` or raise WorkflowInputError. Writes nothing."""
    definition = get_workflow(workflow)
    if not isinstance(input, Mapping):
        raise WorkflowInputError({"input": "must be a JSON object"})
    return definition, definition.validate(input)


def run_submit(
    *,
    workflow: str,
    input: Mapping[str, Any],
    owner_id: int | None = None,
    priority: int = 0,
    deadline: datetime | None = None,
    correlation_id: str = "",
    kick: bool = True,
    job_id: int | None = None,
) -> Run:
    """Validate, then write the run and all its step rows in one transaction; kick the scheduler
    after commit. `job_id`: the Job this run is a firing of (see `job_run_submit`).

    Invariant: bad input raises WorkflowInputError before any row is written. Transaction: its
    own atomic block, which nests as a savepoint inside a caller's (an order and its run commit
    together). If the kick is lost, the periodic tick claims the Pending first step anyway.
    """
    definition, cleaned = run_validate_input(workflow=workflow, input=input)
    if not -32768 <= priority <= 32767:
        raise WorkflowInputError({"priority": "must be between -32768 and 32767"})
    with transaction.atomic():
        run = Run.objects.create(
            workflow=definition.name,
            input=cleaned,
            owner_id=owner_id,
            priority=priority,
            deadline=deadline,
            correlation_id=correlation_id,
            job_id=job_id,
        )
        steps = [
            _new_step(
                run,
                step_def,
                seq=index,
                kind=Step.Kind.FORWARD,
                state=Step.State.PENDING if index == 0 else Step.State.WAITING,
            )
            for index, step_def in enumerate(definition.steps)
        ]
        steps[0].payload = definition.steps[0].payload(_step_context(run, steps))
        Step.objects.bulk_create(steps)
        _event(run.id, RunEvent.Type.RECEIVED, workflow=definition.name, correlation_id=correlation_id)
        if kick:
            _run_start(run, first_operation=definition.steps[0].operation)
    return run


# ---------------------------------------------------------------------------------------------
# Jobs (seed 004): the input that produces runs
# ---------------------------------------------------------------------------------------------


class JobBusy(Exception):
    """A non-idempotent job already has a run going; a second one must not start."""

    def __init__(self, job_id: int, run_id: uuid.UUID) -> None:
        self.job_id, self.run_id = job_id, run_id
        super().__init__(f"job {job_id} is not idempotent and run {run_id} is still going")


def _cron_error(cron: str) -> str | None:
    """Why `cron` is not a five-field cron expression (Celery's own crontab parser), or None."""
    fields = cron.split()
    if len(fields) != 5:
        return "must have five fields: minute hour day-of-month month day-of-week"
    minute, hour, day_of_month, month_of_year, day_of_week = fields
    try:
        crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
        )
    except (ValueError, IndexError) as exc:
        return f"not a valid cron expression: {exc}"
    return None


def job_create(
    *,
    owner_id: int,
    name: str,
    workflow: str,
    input: Mapping[str, Any],
    cron: str = "",
    timezone_name: str = "UTC",
    max_retry: int = 0,
    priority: int = 0,
    idempotent: bool = True,
) -> Job:
    """Create a one-off (`cron` empty) or recurring job. Invariant: the workflow input, the cron
    expression, the time zone and the numbers are all checked first; bad input raises
    WorkflowInputError (field -> messages) and writes nothing. Transaction: one INSERT."""
    errors: dict[str, str] = {}
    definition, cleaned = run_validate_input(workflow=workflow, input=input)
    name = name.strip()
    if not name or len(name) > 200:
        errors["name"] = "must be 1 to 200 characters"
    cron = " ".join(cron.split())
    if cron and (cron_error := _cron_error(cron)):
        errors["cron"] = cron_error
    try:
        ZoneInfo(timezone_name)
    except (ZoneInfoNotFoundError, ValueError):
        errors["timezone"] = f"unknown time zone {timezone_name!r}"
    if not 0 <= max_retry <= 100:
        errors["max_retry"] = "must be between 0 and 100"
    if not -32768 <= priority <= 32767:
        errors["priority"] = "must be between -32768 and 32767"
    if not errors and Job.objects.filter(owner_id=owner_id, name=name).exists():
        errors["name"] = "you already have a job with this name"
    if errors:
        raise WorkflowInputError(errors)
    return Job.objects.create(
        owner_id=owner_id,
        name=name,
        workflow=definition.name,
        input=cleaned,
        is_recurring=bool(cron),
        cron=cron,
        timezone=timezone_name,
        max_retry=max_retry,
        priority=priority,
        idempotent=idempotent,
    )


def job_run_submit(*, job_id: int, kick: bool = True) -> Run:
    """Start a run of `job_id`: its workflow, input, owner and priority; correlation id
    `job:<id>`. Invariant: a non-idempotent job never has two unfinished runs (the job row is
    locked while we look, so two submitters cannot both pass); raises JobBusy instead.
    Transaction: one atomic block with the run's own (see `run_submit`)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job_id)
        if not job.idempotent:
            going = (
                Run.objects.filter(job_id=job.pk, state__in=Run.UNFINISHED_STATES)
                .values_list("id", flat=True)
                .first()
            )
            if going is not None:
                raise JobBusy(job.pk, going)
        return run_submit(
            workflow=job.workflow,
            input=job.input,
            owner_id=job.owner_id,
            priority=job.priority,
            correlation_id=f"job:{job.pk}",
            kick=kick,
            job_id=job.pk,
        )


def _run_start(run: Run, *, first_operation: str) -> None:
    """Get a new run going. The scheduler's claim runs right here, in the submitter's transaction
    (the pattern's actors are logical, as with inline replies), when the first step's operation
    has room under the in-flight cap: that saves the kick's broker hop and task. Otherwise - a
    burst - the scheduler is kicked after commit and claims as capacity frees up."""
    cap = settings.SAS["MAX_IN_FLIGHT_PER_OPERATION"]
    if settings.SAS["CLAIM_ON_SUBMIT"] and (
        Step.objects.filter(process_state=Step.State.PROCESSING, operation=first_operation).count() < cap
    ):
        claims = step_claim_due(instance=scheduler_instance_id(), limit=1, run_id=run.id)
        if claims:
            transaction.on_commit(lambda: claims_dispatch(claims))
            return
    transaction.on_commit(scheduler_kick_enqueue)


KICK_PENDING_KEY = "sas:scheduler:kick-pending"


def kick_pending_key() -> str:
    return f"{settings.REDIS_PREFIX}{KICK_PENDING_KEY}"


def scheduler_kick_enqueue(countdown: float = 0.0) -> None:
    """Ask a scheduler to claim now (or in `countdown` seconds, when a backoff ends). Best
    effort: losing it only delays work until the periodic tick.

    Immediate kicks are coalesced: while one is queued and not yet started (a Redis flag that
    the kick task clears when it starts), more submits do not queue more - a burst of 1,000
    orders costs a handful of kicks, not 1,000 (which would also sit in front of replies on the
    scheduler queue). The flag expires after 2 s in case a kick message is lost.
    """
    try:
        if not countdown and not get_redis().set(kick_pending_key(), "1", nx=True, px=2000):
            return
    except Exception:
        logger.warning("kick coalescing unavailable (Redis); sending the kick anyway", exc_info=True)
    try:
        current_app.send_task("scheduler.kick", ignore_result=True, countdown=countdown or None)
    except Exception:
        logger.warning("scheduler kick not sent; the periodic tick will pick the work up", exc_info=True)


# ---------------------------------------------------------------------------------------------
# Claim and dispatch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    step_id: int
    run_id: str
    name: str
    operation: str
    lease: str
    complete_by: datetime
    claimed_at: datetime
    idempotency_key: str
    payload: dict[str, Any]
    attempt: int
    failure_count: int

    def message(self) -> dict[str, Any]:
        """The agent request: ids, fence, deadline and payload - JSON only."""
        return {
            "step_id": self.step_id,
            "lease": self.lease,
            "complete_by": self.complete_by.isoformat(),
            "idempotency_key": self.idempotency_key,
            "payload": self.payload,
            "attempt": self.attempt,
        }


# statement_timestamp(), not now(): Django's Now() is statement_timestamp() on PostgreSQL, and
# now() is the transaction's start - a step made Pending earlier in the same transaction (the
# reply that claims the run's next step) would not yet be due.
#
# One round trip does the whole claim: pick (FOR UPDATE SKIP LOCKED), move to Processing with a
# fresh lease and deadline, and write the attempt's history row. `{due}` is one or two CTEs
# named due_*; their union is what gets claimed.
_CLAIM_SQL = """
WITH {due},
claimed AS (
    UPDATE scheduler_step AS s
    SET process_state = 'processing',
        locked_by = %(instance)s,
        lease = gen_random_uuid(),
        complete_by = statement_timestamp() + s.timeout,
        attempts = s.attempts + 1,
        updated_at = statement_timestamp()
    WHERE s.id IN ({due_ids})
    RETURNING s.id, s.run_id, s.name, s.operation, s.lease, s.complete_by,
              statement_timestamp() AS claimed_at, s.idempotency_key, s.payload, s.attempts,
              s.failure_count, s.priority, s.deadline, s.not_before
),
history AS (
    INSERT INTO scheduler_taskexecutionhistory
        (step_id, run_id, kind, status, lease, retry_count, worker, error, detail, started_at)
    SELECT id, run_id, 'attempt', 'started', lease, failure_count, %(instance)s, '',
           jsonb_build_object('attempt', attempts, 'complete_by', complete_by), claimed_at
    FROM claimed
),
started AS (
    -- A run's first claim starts it, in the same statement: whoever claims (a scheduler, or a
    -- replying agent claiming one more step of its operation for another run) can never leave
    -- a run Pending while its steps run - a Pending run would never be marked Completed.
    UPDATE scheduler_run AS r
    SET state = 'running', updated_at = statement_timestamp()
    WHERE r.id IN (SELECT run_id FROM claimed) AND r.state = 'pending'
    RETURNING r.id
)
SELECT id, run_id, name, operation, lease, complete_by, claimed_at, idempotency_key, payload,
       attempts, failure_count, run_id IN (SELECT id FROM started) AS run_started
FROM claimed
ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
"""

_DUE_SQL = """{name} AS (
    SELECT id FROM scheduler_step
    WHERE process_state = 'pending' AND not_before <= statement_timestamp() {filters}
    ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC, id ASC
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
)"""


def operations_in_flight() -> dict[str, int]:
    """Processing steps per agent operation (served by the partial index on Processing rows)."""
    rows = (
        Step.objects.filter(process_state=Step.State.PROCESSING)
        .values_list("operation")
        .annotate(n=models.Count("id"))
    )
    return dict(rows)


def step_claim_due(
    *,
    instance: str,
    limit: int,
    run_id: uuid.UUID | str | None = None,
    exclude_operations: list[str] | None = None,
    operation: str | None = None,
) -> list[Claim]:
    """Atomically claim up to `limit` due Pending steps for `instance`.

    Invariant: two schedulers never claim the same step (`FOR UPDATE SKIP LOCKED` + the state
    change in the same statement); highest priority, then earliest run deadline, first. Each claim
    gets a fresh lease and `complete_by = now() + timeout` from the database clock; a run whose
    first step this is becomes Running in the same statement (and gets its "started" event).
    Transaction: the caller's (must be inside one: the history rows and the dispatch-on-commit go
    with it).
    """
    params: dict[str, Any] = {
        "instance": instance,
        "run_id": str(run_id) if run_id else None,
        "saturated": exclude_operations or [],
        "operation": operation,
        "limit": limit,
    }
    saturated = " AND operation <> ALL(%(saturated)s)" if exclude_operations else ""
    if run_id is not None and operation is not None:
        # A reply's follow-up: the run's next step, plus one more step of the operation whose
        # slot the reply just freed (not the same row twice).
        not_the_runs = "AND operation = %(operation)s AND id NOT IN (SELECT id FROM due_run)"
        due = ",\n".join(
            [
                _DUE_SQL.format(name="due_run", filters="AND run_id = %(run_id)s", limit="1"),
                _DUE_SQL.format(name="due_op", filters=not_the_runs + saturated, limit="%(limit)s"),
            ]
        )
        due_ids = "SELECT id FROM due_run UNION ALL SELECT id FROM due_op"
    else:
        filters = saturated
        if run_id is not None:
            filters += " AND run_id = %(run_id)s"
        if operation is not None:
            filters += " AND operation = %(operation)s"
        due = _DUE_SQL.format(name="due_all", filters=filters, limit="%(limit)s")
        due_ids = "SELECT id FROM due_all"
    with connection.cursor() as cursor:
        cursor.execute(_CLAIM_SQL.format(due=due, due_ids=due_ids), params)
        rows = cursor.fetchall()
    claims = [
        Claim(
            step_id=row[0],
            run_id=str(row[1]),
            name=row[2],
            operation=row[3],
            lease=str(row[4]),
            complete_by=row[5],
            claimed_at=row[6],
            idempotency_key=row[7],
            # Django registers a jsonb loader that returns text (JSONField decodes it); decode here.
            payload=json.loads(row[8]) if isinstance(row[8], str) else (row[8] or {}),
            attempt=row[9],
            failure_count=row[10],
        )
        for row in rows
    ]
    for rid in sorted({str(row[1]) for row in rows if row[11]}):
        _event(rid, RunEvent.Type.STARTED)
    return claims


def claims_dispatch(claims: list[Claim]) -> int:
    """Send each claim to its agent queue; the message expires at the step's complete-by.

    A failed publish is logged and left alone: the step is Processing with a deadline, so the
    supervisor returns it to Pending once the deadline passes. Returns how many were sent.
    """
    sent = 0
    for claim in claims:
        remaining = (claim.complete_by - timezone.now()).total_seconds()
        if remaining <= 0:
            continue
        try:
            current_app.send_task(
                claim.operation,
                kwargs=claim.message(),
                expires=claim.complete_by,
                # Nest inside the deadline: the soft limit fires at complete-by if the agent's
                # own deadline checks did not stop it; the hard limit kills a stuck child 2s later.
                soft_time_limit=max(1, math.ceil(remaining)),
                time_limit=max(1, math.ceil(remaining)) + 2,
                ignore_result=True,
            )
            sent += 1
        except Exception:
            logger.exception("dispatch of step %s failed; supervisor will recover it", claim.step_id)
    return sent


def scheduler_pump(
    *, instance: str, limit: int, run_id: uuid.UUID | str | None = None, max_in_flight: int | None = None
) -> int:
    """Claim a batch and dispatch it after commit. Returns the number claimed.

    Backpressure: an operation that already has `max_in_flight` steps Processing is not claimed
    for. A claim starts the step's complete-by clock, so claiming far more than the agents can
    take would let deadlines run out while messages wait in the queue.
    """
    saturated: list[str] = []
    if max_in_flight:
        saturated = [op for op, n in operations_in_flight().items() if n >= max_in_flight]
    with transaction.atomic():
        claims = step_claim_due(instance=instance, limit=limit, run_id=run_id, exclude_operations=saturated)
        if claims:
            transaction.on_commit(lambda: claims_dispatch(claims))
    return len(claims)


# ---------------------------------------------------------------------------------------------
# Replies
# ---------------------------------------------------------------------------------------------


def _close_attempt(*, lease: str | uuid.UUID, status: str, error: str = "", **detail: Any) -> None:
    TaskExecutionHistory.objects.filter(lease=lease, kind=TaskExecutionHistory.Kind.ATTEMPT).update(
        status=status, ended_at=Now(), error=error[:4000]
    )


def _record_ignored_reply(
    *, step_id: int, lease: str, outcome: str, worker: str, error: str, result: Any
) -> None:
    row = Step.objects.filter(pk=step_id).values("run_id", "process_state", "lease", "failure_count").first()
    if row is None:
        logger.warning("reply for unknown step %s ignored", step_id)
        return
    now = timezone.now()
    TaskExecutionHistory.objects.create(
        step_id=step_id,
        run_id=row["run_id"],
        kind=TaskExecutionHistory.Kind.LATE_REPLY,
        status=TaskExecutionHistory.Status.IGNORED,
        lease=None,
        retry_count=row["failure_count"],
        worker=worker,
        error=error[:4000],
        started_at=now,
        ended_at=now,
        detail={
            "reply_lease": lease,
            "outcome": outcome,
            "current_state": row["process_state"],
            "current_lease": str(row["lease"]) if row["lease"] else None,
            "result": result,
        },
    )
    logger.info("stale reply for step %s (lease %s, outcome %s) ignored", step_id, lease, outcome)


def step_reply(
    *,
    step_id: int,
    lease: str,
    outcome: Outcome,
    result: Any = None,
    error: str = "",
    worker: str = "",
    claim_next: bool = True,
    retry_after: float = 0.0,
) -> ReplyResult:
    """Accept an agent's reply if it still holds the step: state Processing, same lease, deadline
    not passed. Otherwise record it as ignored and change nothing.

    success -> Processed, next step Pending (or the run completes / finishes compensating).
    permanent -> Error, alert, the run compensates (or, for a compensation, the run Fails).
    transient -> failure_count + 1, Pending after backoff (at least `retry_after`, which an
    agent sets from an open circuit breaker), or Error at the step's limit.

    Transaction: one atomic block. With `claim_next` the next step of the run is claimed in the
    same transaction and dispatched after commit (the scheduler's work, done in the replier's
    process - the pattern's actors are logical).
    """
    with transaction.atomic():
        fenced = Step.objects.filter(
            pk=step_id, process_state=Step.State.PROCESSING, lease=lease, complete_by__gt=Now()
        )
        accepted: _Accepted | None = None
        if outcome == "success":
            accepted = _step_accept_success(step_id=step_id, lease=lease, result=result)
            updated = 0 if accepted is None else 1
        elif outcome == "permanent":
            updated = fenced.update(
                process_state=Step.State.ERROR,
                last_error=error[:4000],
                error_permanent=True,
                locked_by=None,
                finished_at=Now(),
                updated_at=Now(),
            )
        elif outcome == "transient":
            # Locks the row; the decision below is a second fenced update.
            updated = fenced.select_for_update().count()
        else:
            raise ValueError(f"unknown reply outcome {outcome!r}")

        if updated == 0:
            _record_ignored_reply(
                step_id=step_id, lease=lease, outcome=outcome, worker=worker, error=error, result=result
            )
            return "ignored"

        if accepted is not None:
            # The run and all its steps in one read: `_advance` needs the siblings anyway.
            steps = list(Step.objects.select_related("run").filter(run_id=accepted.run_id).order_by("seq"))
            step = next(s for s in steps if s.pk == step_id)
            run_event.send(sender=RunEvent, event=accepted.event)
            _advance(step, steps=steps)
        else:
            step = Step.objects.select_related("run").get(pk=step_id)
        if outcome == "permanent":
            _close_attempt(lease=lease, status=TaskExecutionHistory.Status.FAILED_PERMANENT, error=error)
            _step_errored(step, reason=f"permanent error: {error}")
        elif outcome == "transient":
            step_fail_attempt(
                step=step,
                status=TaskExecutionHistory.Status.FAILED_TRANSIENT,
                error=error,
                actor=worker or "agent",
                history_kind=TaskExecutionHistory.Kind.SCHEDULER,
                min_backoff=retry_after,
            )
        if claim_next:
            instance = worker or scheduler_instance_id()
            # The run's next step, and one more step of the operation whose slot this reply
            # freed: in-flight work per operation stays level without waiting for a tick.
            claims = step_claim_due(instance=instance, limit=1, run_id=step.run_id, operation=step.operation)
            if claims:
                transaction.on_commit(lambda: claims_dispatch(claims))
    return "accepted"


@dataclass(frozen=True)
class FailureDecision:
    decision: Literal["retry", "error", "skipped"]
    backoff: float = 0.0


# The success transition, the close of its attempt's history row and the step_completed event in
# one round trip: this is the hottest statement of the engine (bench/README.md has the profile).
_ACCEPT_SUCCESS_SQL = """
WITH s AS (
    UPDATE scheduler_step
    SET process_state = 'processed', result = %(result)s::jsonb, locked_by = NULL,
        finished_at = statement_timestamp(), last_error = '', updated_at = statement_timestamp()
    WHERE id = %(id)s AND process_state = 'processing' AND lease = %(lease)s
      AND complete_by > statement_timestamp()
    RETURNING id, run_id, name, attempts
), h AS (
    UPDATE scheduler_taskexecutionhistory
    SET status = 'succeeded', ended_at = statement_timestamp()
    WHERE lease = %(lease)s AND kind = 'attempt' AND EXISTS (SELECT 1 FROM s)
), ev AS (
    INSERT INTO scheduler_runevent (event_id, run_id, step_id, type, data, created_at)
    SELECT gen_random_uuid(), run_id, id, 'step_completed',
           jsonb_build_object('attempt', attempts, 'step', name), statement_timestamp()
    FROM s
    RETURNING id, event_id, run_id, step_id, type, data, created_at
)
SELECT id, event_id, run_id, step_id, type, data, created_at FROM ev
"""


@dataclass(frozen=True)
class _Accepted:
    run_id: uuid.UUID
    event: RunEvent


def _step_accept_success(*, step_id: int, lease: str, result: Any) -> _Accepted | None:
    """Processing -> Processed if the reply still holds the step; records its event. None if the
    fence refused it (stale lease, deadline passed, not Processing)."""
    with connection.cursor() as cursor:
        cursor.execute(_ACCEPT_SUCCESS_SQL, {"id": step_id, "lease": lease, "result": json.dumps(result)})
        row = cursor.fetchone()
    if row is None:
        return None
    event_pk, event_id, run_id, event_step_id, type_, data, created_at = row
    event = RunEvent(
        id=event_pk,
        event_id=event_id,
        run_id=run_id,
        step_id=event_step_id,
        type=type_,
        # Django registers a jsonb loader that returns text (JSONField decodes it); decode here.
        data=json.loads(data) if isinstance(data, str) else data,
        created_at=created_at,
    )
    return _Accepted(run_id=run_id, event=event)


def step_fail_attempt(
    *,
    step: Step,
    status: str,
    error: str,
    actor: str,
    history_kind: str,
    kick: bool = True,
    min_backoff: float = 0.0,
) -> FailureDecision:
    """One attempt of `step` (locked by the caller, still Processing with `step.lease`) failed or
    timed out: count it, then retry after backoff or mark Error at the limit.

    Used by the supervisor's sweep (timed out) and by a transient reply. With `kick`, a retry
    sends the scheduler a kick timed for the end of the backoff (a sweep sends one per batch
    instead). Transaction: the caller's; the update is fenced on the lease, so two callers that
    race count the failure once.
    """
    lease = step.lease
    failures = step.failure_count + 1
    if failures < step.max_failures:
        delay = max(
            min_backoff + random.uniform(0, 0.1),
            backoff_seconds(failure_count=failures, base=step.backoff_base, cap=step.backoff_max),
        )
        updated = Step.objects.filter(pk=step.pk, process_state=Step.State.PROCESSING, lease=lease).update(
            process_state=Step.State.PENDING,
            failure_count=F("failure_count") + 1,
            locked_by=None,
            lease=None,
            complete_by=None,
            not_before=_after(delay),
            last_error=error[:4000],
            updated_at=Now(),
        )
        decision: Literal["retry", "error"] = "retry"
    else:
        delay = 0.0
        updated = Step.objects.filter(pk=step.pk, process_state=Step.State.PROCESSING, lease=lease).update(
            process_state=Step.State.ERROR,
            failure_count=F("failure_count") + 1,
            locked_by=None,
            last_error=error[:4000],
            finished_at=Now(),
            updated_at=Now(),
        )
        decision = "error"
    if updated == 0:
        return FailureDecision("skipped")
    if lease is not None:
        _close_attempt(lease=lease, status=status, error=error)
    now = timezone.now()
    TaskExecutionHistory.objects.create(
        step_id=step.pk,
        run_id=step.run_id,
        kind=history_kind,
        status=(
            TaskExecutionHistory.Status.RETRY_SCHEDULED
            if decision == "retry"
            else TaskExecutionHistory.Status.ERRORED
        ),
        lease=None,
        retry_count=failures,
        worker=actor,
        error=error[:4000],
        started_at=now,
        ended_at=now,
        detail={
            "cause": status,
            "failed_lease": str(lease) if lease else None,
            "backoff_seconds": round(delay, 3),
        },
    )
    step.refresh_from_db()
    if decision == "retry":
        _event(step.run_id, RunEvent.Type.STEP_RETRYING, step=step, failure_count=failures, error=error[:500])
        if kick:
            # Claim it again as soon as its backoff ends rather than at the next tick.
            transaction.on_commit(lambda: scheduler_kick_enqueue(countdown=delay + 0.05))
    else:
        _step_errored(step, reason=f"{status} {failures} times (limit {step.max_failures}): {error}")
    return FailureDecision(decision, delay)


def _step_errored(step: Step, *, reason: str) -> None:
    """A step is in Error: alert the operator; compensate the run (forward step) or fail it
    (compensation step)."""
    _event(step.run_id, RunEvent.Type.STEP_FAILED, step=step, error=reason[:500])
    if step.kind == Step.Kind.FORWARD:
        alert_raise(
            run_id=step.run_id, step_id=step.pk, kind=Alert.Kind.STEP_FAILED, message=f"{step.name}: {reason}"
        )
        run_compensate(run_id=step.run_id, reason=f"step {step.name} failed: {reason}")
    else:
        updated = Run.objects.filter(pk=step.run_id, state=Run.State.COMPENSATING).update(
            state=Run.State.FAILED,
            error=f"compensation {step.name} failed: {reason}"[:4000],
            finished_at=Now(),
        )
        alert_raise(
            run_id=step.run_id,
            step_id=step.pk,
            kind=Alert.Kind.COMPENSATION_FAILED,
            severity=Alert.Severity.CRITICAL,
            message=(
                f"compensation {step.name} failed ({reason}); the run is only partly undone. "
                "Fix the cause, then use 'Resume compensation' on the run."
            ),
        )
        if updated:
            _event(step.run_id, RunEvent.Type.FAILED, step=step, error=reason[:500])


def _advance(step: Step, *, steps: list[Step]) -> None:
    """`step` was just Processed: make the next one Pending, or finish the run. `steps`: all the
    run's steps, as read after the transition."""
    run = step.run
    if step.kind == Step.Kind.COMPENSATION and step.compensates_id is not None:
        Step.objects.filter(pk=step.compensates_id).update(
            process_state=Step.State.COMPENSATED, updated_at=Now()
        )
    next_step = next(
        (
            s
            for s in steps
            if s.kind == step.kind and s.seq > step.seq and s.process_state == Step.State.WAITING
        ),
        None,
    )
    if next_step is not None:
        definition = get_workflow(run.workflow).step(next_step.name)
        payload = definition.payload(_step_context(run, steps))
        Step.objects.filter(pk=next_step.pk, process_state=Step.State.WAITING).update(
            process_state=Step.State.PENDING, payload=payload, not_before=Now(), updated_at=Now()
        )
        return
    if step.kind == Step.Kind.FORWARD:
        if Run.objects.filter(pk=run.id, state=Run.State.RUNNING).update(
            state=Run.State.COMPLETED, finished_at=Now(), updated_at=Now()
        ):
            _event(run.id, RunEvent.Type.COMPLETED, correlation_id=run.correlation_id)
    else:
        _run_finish_compensation(run)


def _run_finish_compensation(run: Run) -> None:
    final = Run.State.CANCELLED if run.cancel_requested else Run.State.COMPENSATED
    if Run.objects.filter(pk=run.id, state=Run.State.COMPENSATING).update(
        state=final, finished_at=Now(), updated_at=Now()
    ):
        _event(
            run.id,
            RunEvent.Type.CANCELLED if final == Run.State.CANCELLED else RunEvent.Type.COMPENSATED,
            correlation_id=run.correlation_id,
        )


# ---------------------------------------------------------------------------------------------
# Compensation and cancellation
# ---------------------------------------------------------------------------------------------


def run_compensate(*, run_id: uuid.UUID | str, reason: str, cancel: bool = False) -> bool:
    """Start undoing a run: cancel the forward steps that have not run, stop the one in flight,
    and create one compensation step per forward step that may have had an effect, in reverse
    order (the first Pending, the rest Waiting).

    A forward step "may have had an effect" if it was ever claimed, unless the remote refused it
    with a permanent error. Compensations are idempotent on the remote side, so undoing a step
    whose effect never happened is a harmless no-op. A step stopped in flight is compensated only
    after its old complete-by, when its agent has given up.

    Returns False if the run was not Pending/Running (already compensating or finished).
    Transaction: its own atomic block (nests in the caller's); the run row is locked first.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.state not in (Run.State.PENDING, Run.State.RUNNING):
            return False
        definition = get_workflow(run.workflow)
        forward = list(
            Step.objects.select_for_update().filter(run_id=run.id, kind=Step.Kind.FORWARD).order_by("seq")
        )
        to_undo: list[Step] = []
        wait_until = timezone.now()
        for s in forward:
            if s.process_state in (Step.State.WAITING, Step.State.PENDING):
                if s.attempts > 0:
                    to_undo.append(s)
                Step.objects.filter(pk=s.pk).update(
                    process_state=Step.State.CANCELLED, locked_by=None, updated_at=Now()
                )
            elif s.process_state == Step.State.PROCESSING:
                if s.complete_by and s.complete_by > wait_until:
                    wait_until = s.complete_by
                Step.objects.filter(pk=s.pk, lease=s.lease).update(
                    process_state=Step.State.CANCELLED, locked_by=None, finished_at=Now(), updated_at=Now()
                )
                if s.lease:
                    _close_attempt(lease=s.lease, status=TaskExecutionHistory.Status.CANCELLED, error=reason)
                to_undo.append(s)
            elif s.process_state == Step.State.PROCESSED or (
                s.process_state == Step.State.ERROR and not s.error_permanent and s.attempts > 0
            ):
                to_undo.append(s)

        compensations: list[Step] = []
        for s in reversed(to_undo):
            comp_def = definition.step(s.name).compensation
            if comp_def is None:
                continue
            comp = _new_step(
                run,
                comp_def,
                seq=COMPENSATION_SEQ_BASE + len(compensations),
                kind=Step.Kind.COMPENSATION,
                state=Step.State.PENDING if not compensations else Step.State.WAITING,
            )
            comp.compensates = s
            comp.not_before = wait_until
            compensations.append(comp)
        if compensations:
            compensations[0].payload = definition.step(compensations[0].name).payload(
                _step_context(run, forward + compensations)
            )
            Step.objects.bulk_create(compensations)
            Step.objects.filter(
                pk__in=[c.compensates_id for c in compensations], process_state=Step.State.PROCESSED
            ).update(process_state=Step.State.COMPENSATING, updated_at=Now())

        Run.objects.filter(pk=run.id).update(
            state=Run.State.COMPENSATING,
            cancel_requested=cancel or run.cancel_requested,
            error=reason[:4000],
            updated_at=Now(),
        )
        run.state = Run.State.COMPENSATING
        run.cancel_requested = cancel or run.cancel_requested
        _event(run.id, RunEvent.Type.COMPENSATING, reason=reason[:500], steps=[c.name for c in compensations])
        if compensations:
            transaction.on_commit(scheduler_kick_enqueue)
        else:
            _run_finish_compensation(run)
    return True


class RunNotCancellable(Exception):
    pass


def run_cancel(*, run_id: uuid.UUID | str, actor: str) -> Run:
    """Cancel a run that has not finished: work not started is dropped, work done is compensated;
    the run ends Cancelled. Raises RunNotCancellable for a finished or already-undoing run."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.state not in (Run.State.PENDING, Run.State.RUNNING):
            raise RunNotCancellable(
                f"run is {run.get_state_display()}; only pending or running runs can be cancelled"
            )
        run_compensate(run_id=run.id, reason=f"cancelled by {actor}", cancel=True)
    run.refresh_from_db()
    return run


def run_resume_compensation(*, run_id: uuid.UUID | str, actor: str) -> int:
    """Operator action for a Failed run: put its failed compensation steps back to Pending with a
    fresh failure budget, and the run back to Compensating. Returns the number of steps resumed."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.state != Run.State.FAILED:
            raise RunNotCancellable(
                f"run is {run.get_state_display()}; only failed runs can resume compensation"
            )
        failed = list(
            Step.objects.filter(run_id=run.id, kind=Step.Kind.COMPENSATION, process_state=Step.State.ERROR)
        )
        Step.objects.filter(pk__in=[s.pk for s in failed], process_state=Step.State.ERROR).update(
            process_state=Step.State.PENDING,
            failure_count=0,
            locked_by=None,
            lease=None,
            complete_by=None,
            not_before=Now(),
            finished_at=None,
            updated_at=Now(),
        )
        now = timezone.now()
        TaskExecutionHistory.objects.bulk_create(
            [
                TaskExecutionHistory(
                    step=s,
                    run=run,
                    kind=TaskExecutionHistory.Kind.OPERATOR,
                    status=TaskExecutionHistory.Status.ACTION,
                    worker=actor,
                    started_at=now,
                    ended_at=now,
                    detail={"action": "resume_compensation"},
                )
                for s in failed
            ]
        )
        Run.objects.filter(pk=run.id).update(state=Run.State.COMPENSATING, finished_at=None, updated_at=Now())
        _event(
            run.id, RunEvent.Type.COMPENSATING, reason=f"resumed by {actor}", steps=[s.name for s in failed]
        )
        transaction.on_commit(scheduler_kick_enqueue)
    return len(failed)

"""The engine's state machine: every transition of a step and of a run, one named function each.

A transition is one conditional statement (or one PostgreSQL function, for the hot ones) whose
WHERE clause carries the state it leaves - and the lease, where there is one - so the rows it
touched are the concurrency check: two callers racing for the same row change it once. The SQL
lives in `scheduler/sql/` (`functions.sql`, installed by migrations; `queries.sql`, one named
statement per transition, loaded once); nothing here assembles SQL. Time is the database clock.

Transitions change rows and nothing else. What follows a transition - events to receivers,
alerts, compensation, a kick of the scheduler - is orchestration, in `scheduler/services/`.

The table of transitions (from, to, trigger, guard) is `scheduler/transitions.md`, beside this file.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import DatabaseError

from scheduler.bulkheads import bulkhead_limits
from scheduler.sqlfiles import bulk_rows, named_statements, sql_count, sql_rows

if TYPE_CHECKING:
    from scheduler.keys import KeyChoice

SQL_DIR = Path(__file__).resolve().parent / "sql"
FUNCTIONS_FILE = SQL_DIR / "functions.sql"
QUERIES_FILE = SQL_DIR / "queries.sql"

# Raised by sas_step_succeed when the caller did not open a transaction for an observed run.
SQLSTATE_RUN_OBSERVED = "SAS01"


@cache
def queries() -> dict[str, str]:
    """The named statements of queries.sql, read once per process."""
    return named_statements(QUERIES_FILE)


def install_functions(conn: BaseDatabaseWrapper | None = None) -> None:
    """CREATE OR REPLACE every function of functions.sql (migrations call this). The file is
    the newest text, which may name columns a later migration adds: bodies are checked when
    they run, not when an earlier migration installs them; the last migration installs last."""
    with (conn or connection).cursor() as cursor:
        cursor.execute("SET check_function_bodies = off")
        cursor.execute(FUNCTIONS_FILE.read_text())
        cursor.execute("RESET check_function_bodies")


def _json(value: Any) -> Any:
    # Django registers a jsonb loader that returns text (JSONField decodes it); decode here.
    return json.loads(value) if isinstance(value, str) else value


def _one(name: str, params: dict[str, Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(queries()[name], params)
        row = cursor.fetchone()
    return None if row is None else row


def _scalar_json(name: str, params: dict[str, Any]) -> Any:
    row = _one(name, params)
    return _json(row[0]) if row else None


def _rows(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sql_rows(queries()[name], params)


def _count(name: str, params: dict[str, Any]) -> int:
    return sql_count(queries()[name], params)


# ---------------------------------------------------------------------------------------------
# What transitions return
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A claimed step: what its agent needs (ids, fence, deadline, payload)."""

    step_id: int
    run_id: str
    name: str
    operation: str
    lease: str
    complete_by: datetime
    claimed_at: datetime
    start_by: datetime
    timeout: float
    idempotency_key: str
    payload: dict[str, Any]
    attempt: int
    failure_count: int
    # A heartbeat step's window in seconds (0: the step does not heartbeat), and the step's
    # whole deadline: a heartbeat attempt may run until then, so its Celery time limits do.
    heartbeat: float = 0.0
    close_by: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Claim:
        return cls(
            step_id=int(data["step_id"]),
            run_id=str(data["run_id"]),
            name=data["name"],
            operation=data["operation"],
            lease=str(data["lease"]),
            complete_by=datetime.fromisoformat(data["complete_by"]),
            claimed_at=datetime.fromisoformat(data["claimed_at"]),
            start_by=datetime.fromisoformat(data["start_by"]),
            timeout=float(data["timeout"]),
            idempotency_key=data["idempotency_key"],
            payload=data["payload"] or {},
            attempt=int(data["attempt"]),
            failure_count=int(data["failure_count"]),
            heartbeat=float(data.get("heartbeat") or 0.0),
            close_by=datetime.fromisoformat(data["close_by"]) if data.get("close_by") else None,
        )

    def message(self) -> dict[str, Any]:
        """The agent request: ids, fence, deadline and payload - JSON only. A heartbeat step's
        request also carries its window (`heartbeat`, seconds)."""
        message: dict[str, Any] = {
            "step_id": self.step_id,
            "lease": self.lease,
            "complete_by": self.complete_by.isoformat(),
            "start_by": self.start_by.isoformat(),
            "timeout": self.timeout,
            "idempotency_key": self.idempotency_key,
            "payload": self.payload,
            "attempt": self.attempt,
        }
        if self.heartbeat:
            message["heartbeat"] = self.heartbeat
        return message


@dataclass
class Transitioned:
    """Claims to dispatch after commit, and events of observed runs (jsonb rows) to announce."""

    claims: list[Claim] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _transitioned(data: dict[str, Any]) -> Transitioned:
    return Transitioned(
        claims=[Claim.from_json(c) for c in data.get("claims") or []], events=list(data.get("events") or [])
    )


@dataclass
class Succeeded(Transitioned):
    accepted: bool = False
    step_id: int = 0
    run_id: str = ""
    operation: str = ""
    needs_payload: int | None = None


@dataclass(frozen=True)
class FailedStep:
    step_id: int
    run_id: str
    name: str
    failure_count: int
    kind: str = ""
    max_failures: int = 0
    error: str = ""
    delay: float = 0.0
    # Why an errored step gave up: "failures" (its budget), "deadline" (its whole-step deadline).
    give_up: str = ""


@dataclass
class Failed:
    """What `step_fail` did: steps back to Pending after a delay, steps errored, and
    compensations that just passed their alert threshold (still retrying)."""

    retried: list[FailedStep] = field(default_factory=list)
    errored: list[FailedStep] = field(default_factory=list)
    alerting: list[FailedStep] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _failed(data: dict[str, Any]) -> Failed:
    def steps(rows: list[dict[str, Any]]) -> list[FailedStep]:
        return [
            FailedStep(
                step_id=int(r["step_id"]),
                run_id=str(r["run_id"]),
                name=r["name"],
                failure_count=int(r["failure_count"]),
                kind=r.get("kind", ""),
                max_failures=int(r.get("max_failures", 0)),
                error=r.get("error", ""),
                delay=float(r.get("delay", 0.0)),
                give_up=r.get("give_up") or "",
            )
            for r in rows
        ]

    return Failed(
        retried=steps(data.get("retried") or []),
        errored=steps(data.get("errored") or []),
        alerting=steps(data.get("alerting") or []),
        events=list(data.get("events") or []),
    )


class RunObserved(Exception):
    """sas_step_succeed refused to run outside a transaction for an observed run."""


# ---------------------------------------------------------------------------------------------
# Step transitions
# ---------------------------------------------------------------------------------------------


def step_claim(*, step_ids: Sequence[int], instance: str, admit: bool = False) -> Transitioned:
    """Pending -> Processing for these steps (those still Pending and due) - with `admit`, only
    those whose bulkhead has a free slot for them (`sas_step_admit`, scheduler/bulkheads.py)."""
    if not admit:
        return _transitioned(_scalar_json("step_claim", {"ids": list(step_ids), "instance": instance}))
    return _transitioned(
        _scalar_json(
            "step_claim_if_room",
            {"ids": list(step_ids), "instance": instance, "bulkheads": bulkhead_limits()},
        )
    )


def step_claim_many(
    *,
    instance: str,
    limit: int,
    operation: str | None = None,
    exclude_operations: Sequence[str] | None = None,
    run_id: uuid.UUID | str | None = None,
) -> Transitioned:
    """Pending -> Processing for up to `limit` due steps, in claim order - priority, then fair
    between owners (sas_step_pick) - skipping locked rows, within each bulkhead's free slots."""
    return _transitioned(
        _scalar_json(
            "step_claim_due",
            {
                "instance": instance,
                "limit": limit,
                "operation": operation,
                "exclude": list(exclude_operations or []),
                "run_id": str(run_id) if run_id else None,
                "bulkheads": bulkhead_limits(),
            },
        )
    )


def step_succeed(
    *, step_id: int, lease: str, result: Any, instance: str, claim_next: bool, observed_ok: bool
) -> Succeeded:
    """Processing -> Processed, and what follows it in the same round trip (see functions.sql).
    Raises RunObserved (nothing written) when the run is observed and `observed_ok` is False."""
    params = {
        "step_id": step_id,
        "lease": lease,
        "result": json.dumps(result),
        "instance": instance,
        "claim_next": claim_next,
        "observed_ok": observed_ok,
        "bulkheads": bulkhead_limits(),
    }
    try:
        data = _scalar_json("step_succeed", params)
    except DatabaseError as exc:
        if getattr(getattr(exc, "__cause__", None), "sqlstate", None) == SQLSTATE_RUN_OBSERVED:
            raise RunObserved(str(exc)) from exc
        raise
    if data is None:
        # No such step (forged, or its run deleted): sas_reply_ignored had no row to record.
        return Succeeded(step_id=step_id)
    base = _transitioned(data)
    return Succeeded(
        claims=base.claims,
        events=base.events,
        accepted=data["outcome"] == "accepted",
        step_id=int(data.get("step_id") or step_id),
        run_id=str(data.get("run_id") or ""),
        operation=data.get("operation") or "",
        needs_payload=data.get("needs_payload"),
    )


@dataclass(frozen=True)
class AttemptOutcome:
    """One attempt that did not succeed: its step, lease, error, and whether it may have
    reached the remote service (sent and timed out, or answered)."""

    step_id: int
    lease: str
    error: str
    reached: bool = True


def _fail(
    *,
    attempts: Sequence[AttemptOutcome],
    cause: str,
    count: bool,
    actor: str,
    history_kind: str,
    min_backoff: float,
    require_live: bool,
) -> Failed:
    if not attempts:
        return Failed()
    return _failed(
        _scalar_json(
            "step_fail",
            {
                "ids": [a.step_id for a in attempts],
                "leases": [a.lease for a in attempts],
                "errors": [a.error for a in attempts],
                "reached": [a.reached for a in attempts],
                "cause": cause,
                "count": count,
                "min_backoff": float(min_backoff),
                "actor": actor,
                "history_kind": history_kind,
                "require_live": require_live,
            },
        )
    )


def step_fail(
    *,
    attempts: Sequence[AttemptOutcome],
    cause: str,
    actor: str,
    history_kind: str,
    min_backoff: float = 0.0,
    require_live: bool = True,
) -> Failed:
    """Processing -> Pending after backoff, or Error at a forward step's failure limit or
    whole-step deadline: attempts that reached the service and failed (a transient reply; no
    reply before complete_by). `require_live`: only while complete_by has not passed (a reply)."""
    return _fail(
        attempts=attempts,
        cause=cause,
        count=True,
        actor=actor,
        history_kind=history_kind,
        min_backoff=min_backoff,
        require_live=require_live,
    )


def step_defer(*, attempts: Sequence[AttemptOutcome], retry_after: float, actor: str) -> Failed:
    """Processing -> Pending at `retry_after` (the breaker's next probe), no failure counted: the
    attempt never reached the service. Error only past the whole-step deadline."""
    return _fail(
        attempts=attempts,
        cause="deferred",
        count=False,
        actor=actor,
        history_kind="scheduler",
        min_backoff=retry_after,
        require_live=True,
    )


def step_requeue(*, attempts: Sequence[AttemptOutcome], actor: str) -> Failed:
    """Processing -> Pending now, no failure counted: no agent started the attempt before its
    start_by (workers down, busy or restarting). Error only past the whole-step deadline."""
    return _fail(
        attempts=attempts,
        cause="requeued",
        count=False,
        actor=actor,
        history_kind="supervisor",
        min_backoff=0.0,
        require_live=False,
    )


@dataclass(frozen=True)
class SkippedRun:
    run_id: str
    job_id: int | None
    error: str


@dataclass
class Skipped:
    """Runs `run_skip_unstarted` skipped, how many expired rows it found, and the events of
    observed runs among them."""

    runs: list[SkippedRun] = field(default_factory=list)
    examined: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)


def run_skip_unstarted(*, batch: int) -> Skipped:
    """Schedule-to-start: up to `batch` job occurrences whose first step was never claimed
    before its `expires_at` - run Pending -> Cancelled, its steps Cancelled, the job's history
    row closed as skipped ("skipped: not started within N s (backlog)"); one statement
    (sas_run_skip_unstarted)."""
    data = _scalar_json("run_skip_unstarted", {"batch": batch})
    return Skipped(
        runs=[SkippedRun(run_id=r["run_id"], job_id=r["job_id"], error=r["error"]) for r in data["skipped"]],
        examined=int(data["examined"]),
        events=list(data.get("events") or []),
    )


@dataclass(frozen=True)
class Supervised:
    step_id: int
    lease: str
    start_by: datetime | None
    complete_by: datetime
    now: datetime


def step_due_for_supervision(*, batch: int) -> list[Supervised]:
    """Lock (SKIP LOCKED) up to `batch` Processing steps past start_by or complete_by."""
    return [
        Supervised(step_id=r[0], lease=str(r[1]), start_by=r[2], complete_by=r[3], now=r[4])
        for r in _rows("step_due_for_supervision", {"batch": batch})
    ]


def step_mark_started(*, steps: Sequence[tuple[int, str]]) -> int:
    """Its agent started it: only complete_by bounds it from now on. (id, lease) pairs."""
    if not steps:
        return 0
    return _count("step_mark_started", {"ids": [s[0] for s in steps], "leases": [s[1] for s in steps]})


def step_mark_done(*, step_id: int, actor: str, reason: str) -> Succeeded:
    """A compensation step -> Processed by an operator's hand, and what follows a success."""
    data = _scalar_json("step_mark_done", {"step_id": step_id, "actor": actor, "reason": reason})
    return Succeeded(
        events=list(data.get("events") or []),
        accepted=data["outcome"] == "accepted",
        run_id=str(data.get("run_id") or ""),
        needs_payload=data.get("needs_payload"),
    )


def reply_ignored(*, step_id: int, lease: str, outcome: str, worker: str, error: str, result: Any) -> None:
    """A reply the fence refused: one late_reply history row (none for a step that does not
    exist); no state changes."""
    _one(
        "reply_ignored",
        {
            "step_id": step_id,
            "lease": lease,
            "outcome": outcome,
            "worker": worker,
            "error": error,
            "result": json.dumps(result),
        },
    )


def step_fail_permanent(*, step_id: int, lease: str, error: str) -> FailedStep | None:
    """Processing -> Error (permanent). None if the fence refused the reply."""
    row = _one("step_fail_permanent", {"step_id": step_id, "lease": lease, "error": error})
    if row is None:
        return None
    return FailedStep(
        step_id=row[0], run_id=str(row[1]), name=row[2], kind=row[3], failure_count=0, error=error
    )


def step_advance(*, step_id: int, payload: dict[str, Any]) -> bool:
    """Waiting -> Pending with its payload."""
    return _count("step_advance", {"step_id": step_id, "payload": json.dumps(payload)}) == 1


def step_cancel_unstarted(*, run_id: uuid.UUID | str) -> list[tuple[int, bool]]:
    """Waiting | Pending -> Cancelled for the run's forward steps: (id, reached) of each."""
    return [(r[0], bool(r[1])) for r in _rows("step_cancel_unstarted", {"run_id": str(run_id)})]


def step_stop(*, run_id: uuid.UUID | str, reason: str) -> list[tuple[int, datetime]]:
    """Processing -> Cancelled for the run's forward steps in flight: (id, old complete_by)."""
    return [(r[0], r[1]) for r in _rows("step_stop", {"run_id": str(run_id), "reason": reason})]


def step_mark_compensating(*, step_ids: Sequence[int]) -> int:
    """Processed -> Compensating."""
    return _count("step_mark_compensating", {"ids": list(step_ids)})


def step_resume(*, run_id: uuid.UUID | str, renew: Sequence[KeyChoice] = ()) -> list[tuple[int, str]]:
    """Error -> Pending (fresh failure budget) for the run's compensation steps; those in
    `renew` (scheduler/keys.py's choices that renew) send under their new key and generation,
    the others keep theirs."""
    renewed = [c for c in renew if c.renewed]
    params = {
        "run_id": str(run_id),
        "ids": [c.step_id for c in renewed],
        "keys": [c.key for c in renewed],
        "generations": [c.generation for c in renewed],
    }
    return [(r[0], r[1]) for r in _rows("step_resume", params)]


def _key_params(key: KeyChoice | None) -> dict[str, Any]:
    """The new key and generation of a renewing choice; NULLs (the key kept) otherwise."""
    if key is None or not key.renewed:
        return {"key": None, "generation": None}
    return {"key": key.key, "generation": key.generation}


def step_resubmit(*, step_id: int, seen: datetime, key: KeyChoice | None = None) -> tuple[str, str] | None:
    """Error -> Pending for a compensation step (fresh failure budget; the idempotency key
    renewed when `key` renews, else the same), if its row is still as an operator saw it
    (`seen`: its updated_at). (run id, name) or None."""
    row = _one("step_resubmit", {"step_id": step_id, "seen": seen, **_key_params(key)})
    return None if row is None else (str(row[0]), row[1])


def step_resubmit_in_place(
    *, step_id: int, seen: datetime, key: KeyChoice | None = None
) -> tuple[str, str, int] | None:
    """Error -> Pending for a forward step whose run is Compensating with no compensation
    attempted yet: the run back to Running, its unattempted compensations dropped, its forward
    steps as before the error; fresh failure budget; the idempotency key renewed when `key`
    renews, else the same. Only the row as an operator saw it (`seen`). The caller holds the run
    and its compensation steps locked. (run id, step name, compensations dropped) or None."""
    row = _one("step_resubmit_in_place", {"step_id": step_id, "seen": seen, **_key_params(key)})
    return None if row is None else (str(row[0]), row[1], int(row[2]))


def step_compensation_retry(*, step_id: int, seen: datetime) -> tuple[str, str] | None:
    """A compensation step Pending in backoff after failures -> due now, failure count 0, if its
    row is still as an operator saw it. (run id, name) or None."""
    row = _one("step_compensation_retry", {"step_id": step_id, "seen": seen})
    return None if row is None else (str(row[0]), row[1])


# ---------------------------------------------------------------------------------------------
# Long steps: paginated (Checkpoint) and heartbeat (HeartbeatStatus)
# ---------------------------------------------------------------------------------------------


def step_continue(*, step_id: int, lease: str, instance: str, claim: bool) -> Transitioned | None:
    """Processing -> Pending (and, with `claim`, claimed again for the next page) after a page
    committed; no failure counted. None if the fence refused it (recorded as ignored)."""
    data = _scalar_json(
        "step_continue", {"step_id": step_id, "lease": lease, "instance": instance, "claim": claim}
    )
    if data is None or data["outcome"] != "accepted":  # None: no such step
        return None
    return _transitioned(data)


@dataclass(frozen=True)
class Heartbeat:
    """What a heartbeat did: `extended` (complete_by is now `complete_by`) or not (lease lost)."""

    extended: bool
    complete_by: datetime | None = None


def step_extend_by_heartbeat(*, step_id: int, lease: str, worker: str) -> Heartbeat:
    """Processing -> Processing with complete_by = now + heartbeat window, fenced by the lease.
    A refused heartbeat extends nothing and is recorded (late_reply, outcome heartbeat)."""
    data = _scalar_json("step_heartbeat", {"step_id": step_id, "lease": lease, "worker": worker})
    if data is None or data.get("outcome") != "extended":  # None: no such step
        return Heartbeat(extended=False)
    return Heartbeat(extended=True, complete_by=datetime.fromisoformat(data["complete_by"]))


def heartbeat_complete(*, step_id: int, lease: str) -> bool:
    """The step's HeartbeatStatus row -> completed, holding the step's row while its lease is current
    (the caller's transaction then writes the effect and accepts the success)."""
    return _one("heartbeat_complete", {"step_id": step_id, "lease": lease}) is not None


@dataclass(frozen=True)
class CheckpointState:
    page_size: int
    page_start: int
    pages_done: int
    rows_done: int
    total: int | None
    completed: bool


def checkpoint_page_begin(*, step_id: int, lease: str) -> CheckpointState | None:
    """Lock the step (lease current) and its checkpoint for one page's transaction; None if
    the lease is not current (the caller must not apply anything)."""
    row = _one("checkpoint_page_begin", {"step_id": step_id, "lease": lease})
    if row is None:
        return None
    return CheckpointState(
        page_size=int(row[0]),
        page_start=int(row[1]),
        pages_done=int(row[2]),
        rows_done=int(row[3]),
        total=None if row[4] is None else int(row[4]),
        completed=bool(row[5]),
    )


def checkpoint_advance(
    *,
    step_id: int,
    lease: str,
    page_start: int,
    next_start: int,
    rows: int,
    total: int | None,
    completed: bool,
) -> bool:
    """Move the checkpoint from `page_start` past the page just written (compare-and-set)."""
    params = {
        "step_id": step_id,
        "lease": lease,
        "page_start": page_start,
        "next_start": next_start,
        "rows": rows,
        "total": total,
        "completed": completed,
    }
    return _count("checkpoint_advance", params) == 1


# ---------------------------------------------------------------------------------------------
# New runs in bulk
# ---------------------------------------------------------------------------------------------


@dataclass
class NewRuns:
    """Column arrays of new runs and of their forward steps, for `runs_insert_many`. Per run (one
    element each): the run's columns, its shape and its first step's payload. Per step of each
    shape (a workflow's forward steps and their policies, once per batch however many runs
    have it): `shape_*`. Per later step whose payload is built at submit: `later_*`. JSON
    values as `Jsonb` (or None)."""

    run_ids: list[uuid.UUID] = field(default_factory=list)
    workflows: list[str] = field(default_factory=list)
    inputs: list[Any] = field(default_factory=list)
    owner_ids: list[int | None] = field(default_factory=list)
    priorities: list[int] = field(default_factory=list)
    job_ids: list[int | None] = field(default_factory=list)
    correlation_ids: list[str] = field(default_factory=list)
    scheduled_for: list[datetime | None] = field(default_factory=list)
    job_attempts: list[int] = field(default_factory=list)
    deadlines: list[datetime | None] = field(default_factory=list)
    observed: list[bool] = field(default_factory=list)
    # Per run: its first step's schedule-to-start (None: it never expires).
    schedule_to_start: list[timedelta | None] = field(default_factory=list)
    shapes: list[int] = field(default_factory=list)
    first_payloads: list[Any] = field(default_factory=list)
    shape_ids: list[int] = field(default_factory=list)
    shape_seqs: list[int] = field(default_factory=list)
    shape_names: list[str] = field(default_factory=list)
    shape_operations: list[str] = field(default_factory=list)
    shape_timeouts: list[timedelta] = field(default_factory=list)
    shape_queue_timeouts: list[timedelta] = field(default_factory=list)
    shape_schedule_to_close: list[timedelta | None] = field(default_factory=list)
    shape_max_failures: list[int] = field(default_factory=list)
    shape_heartbeat_windows: list[timedelta | None] = field(default_factory=list)
    shape_backoff_base: list[float] = field(default_factory=list)
    shape_backoff_max: list[float] = field(default_factory=list)
    later_run_ids: list[uuid.UUID] = field(default_factory=list)
    later_seqs: list[int] = field(default_factory=list)
    later_payloads: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class WrittenRun:
    """A run `runs_insert_many` wrote: its first step's id and its "received" event (as the
    rows `events_announce` takes; built when asked for - only observed runs' events are
    announced, and parsing every run's event data was a twentieth of a jobs batch);
    `created_at` is the run's too."""

    run_id: uuid.UUID
    first_step_id: int
    created_at: datetime
    event_pk: int
    event_id: uuid.UUID
    data: Any

    @property
    def event(self) -> dict[str, Any]:
        return {
            "id": self.event_pk,
            "event_id": self.event_id,
            "run_id": self.run_id,
            "step_id": None,
            "type": "received",
            "data": _json(self.data),
            "created_at": self.created_at,
        }


def runs_insert_many(*, new: NewRuns) -> dict[uuid.UUID, WrittenRun]:
    """-> Pending runs, their forward steps (first Pending, the rest Waiting) and "received"
    events, in one statement. A run whose job occurrence already has one (the unique (job,
    scheduled_for, job_attempt)) is not written, nor anything of it. Returns the runs written,
    by id. (A job occurrence's "started" history row is the jobs dispatcher's
    `job_history_open`.)"""
    rows, _ = bulk_rows(queries()["runs_insert_many"], vars(new))
    return {
        run_id: WrittenRun(run_id, int(step_id), created_at, event_pk, event_id, data)
        for run_id, step_id, event_pk, event_id, data, created_at in rows
    }


# ---------------------------------------------------------------------------------------------
# Run transitions (the others happen inside sas_step_claim and sas_step_succeed)
# ---------------------------------------------------------------------------------------------


def run_mark_compensating(*, run_id: uuid.UUID | str, reason: str, cancel: bool) -> bool | None:
    """Pending | Running -> Compensating. Returns the run's cancel_requested, None if refused."""
    row = _one("run_compensate", {"run_id": str(run_id), "reason": reason, "cancel": cancel})
    return None if row is None else bool(row[0])


def run_end_compensation(*, run_id: uuid.UUID | str) -> tuple[str, str] | None:
    """Compensating -> Compensated | Cancelled. (state, correlation id), or None if refused."""
    row = _one("run_finish_compensation", {"run_id": str(run_id)})
    return None if row is None else (row[0], row[1])


def runs_cancel_unstarted(*, job_id: int, reason: str) -> list[tuple[uuid.UUID, bool, int]]:
    """A job's Pending runs never claimed -> Cancelled, with their steps and a "cancelled" event
    each. Returns (run id, observed, event id) per run cancelled; a run being claimed right now
    is not (it has started and finishes)."""
    return [
        (uuid.UUID(str(run_id)), bool(observed), int(event_id))
        for run_id, observed, event_id in _rows("runs_cancel_unstarted", {"job_id": job_id, "reason": reason})
    ]


def run_fail(*, run_id: uuid.UUID | str, reason: str) -> bool:
    """Compensating -> Failed."""
    return _count("run_fail", {"run_id": str(run_id), "reason": reason}) == 1


def run_reopen_compensation(*, run_id: uuid.UUID | str) -> bool:
    """Failed -> Compensating."""
    return _count("run_resume_compensation", {"run_id": str(run_id)}) == 1

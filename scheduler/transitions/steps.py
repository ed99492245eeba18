"""The step transitions: claim, succeed, fail, defer, requeue, supervise, stop, resume and
resubmit - one conditional statement (or PostgreSQL function) each."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.utils import DatabaseError

from scheduler.bulkheads import bulkhead_limits

if TYPE_CHECKING:
    from scheduler.keys import KeyChoice
from scheduler.transitions.results import (
    Failed,
    FailedStep,
    RunObserved,
    Succeeded,
    Transitioned,
    _failed,
    _transitioned,
)
from scheduler.transitions.statements import SQLSTATE_RUN_OBSERVED, _count, _one, _rows, _scalar_json

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


def step_first_delay(*, step_id: int, at: datetime) -> bool:
    """Pending -> Pending not before `at`: a new run's first step, never claimed."""
    return _count("step_first_delay", {"step_id": step_id, "at": at}) == 1


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

"""The run transitions: new runs with their steps in bulk, and a run's compensation, failure
and cancellation (the others happen inside sas_step_claim and sas_step_succeed)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from scheduler.sqlfiles import bulk_rows

if TYPE_CHECKING:
    pass
from scheduler.transitions.statements import _count, _json, _one, _rows, engine_queries

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
    rows, _ = bulk_rows(engine_queries()["runs_insert_many"], vars(new))
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

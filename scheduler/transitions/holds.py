"""The holds' transitions (issue 30; SQL in scheduler/sql/holds.sql, rules in scheduler/holds.md):
new runs taking their concurrency keys, the supervisor's reconciliation, and a pause's hold and
release."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from scheduler.transitions.statements import _scalar_json


def runs_key_hold(*, run_ids: Sequence[uuid.UUID], keys: Sequence[str], limits: Sequence[int]) -> list[str]:
    """New runs (Pending, first step Pending and never claimed) take their keys; their first
    steps Pending -> Waiting; each key gives its free slots to its oldest waiters (Waiting ->
    Pending). One statement (sas_runs_key_hold). Returns the runs admitted."""
    data = _scalar_json(
        "runs_key_hold", {"run_ids": list(run_ids), "keys": list(keys), "limits": list(limits)}
    )
    return [str(run_id) for run_id in data or []]


@dataclass(frozen=True)
class Reconciled:
    held: int
    admitted: int
    # ScheduledJob rows of paused scopes' jobs held (a dispatcher batch that raced the pause).
    held_occurrences: int = 0


def holds_settle(*, batch: int) -> Reconciled:
    """Pending steps and job occurrences of paused scopes not yet held, held; up to `batch` keys
    with waiters given their free slots (sas_holds_reconcile)."""
    data = _scalar_json("holds_reconcile", {"batch": batch})
    return Reconciled(
        held=int(data["held"]),
        admitted=int(data["admitted"]),
        held_occurrences=int(data["held_occurrences"]),
    )


def pauses_hold() -> int:
    """Every Pending step of every paused scope held (not_before = sas_held()). Steps held."""
    return int(_scalar_json("pauses_hold", {}))


def occurrences_hold() -> int:
    """Every ScheduledJob row with a due time of every paused scope's jobs held
    (next_execution_at = sas_held(): the jobs dispatcher does not fire it). Rows held."""
    return int(_scalar_json("occurrences_hold", {}))


@dataclass(frozen=True)
class Released:
    released: int
    paused_seconds: float
    # The scope's jobs' ScheduledJob rows due again (a next row at its occurrence's time).
    occurrences: int = 0


def pause_release(*, pause_id: int) -> Released | None:
    """The pause row deleted; its scope's held steps due now and its unfinished work's deadlines
    shifted by the paused time; its jobs' held occurrences back (a next row due at its
    occurrence's time, so the dispatcher applies the job's catch-up policy to what was missed;
    queued and retry rows due now) - sas_pause_release. None: no such pause (resumed already)."""
    data = _scalar_json("pause_release", {"pause_id": pause_id})
    if data is None:
        return None
    return Released(
        released=int(data["released"]),
        paused_seconds=float(data["paused_seconds"]),
        occurrences=int(data["occurrences"]),
    )

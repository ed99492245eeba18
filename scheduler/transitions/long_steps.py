"""The long steps' transitions (issue 9): a paginated step's checkpoint, a heartbeat step's
deadline extended by each beat."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass
from scheduler.transitions.results import Transitioned, _transitioned
from scheduler.transitions.statements import _count, _one, _scalar_json

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

"""Long steps: paginated (seed 004's Checkpoint) and heartbeat (seed 004's JobStatus).

What an agent calls while it works, each a transition fenced by the step's lease:

- a paginated step's page: `page_begin` (in the agent's transaction: holds the step while its
  lease is current, returns the checkpoint), the domain writes the page's effect, `page_commit`
  (moves the checkpoint past the page, compare-and-set) - all in ONE transaction, so a page's
  effect and its checkpoint commit together or not at all; then the reply `continue` (next page
  at once, no failure counted) or `success` after the last page (`step_reply`);
- a heartbeat step: `step_heartbeat` (complete_by moves to now + the step's window) while it
  works, and `heartbeat_finish` in the transaction that writes its effect and accepts its
  success.

A worker whose lease is gone (its deadline passed and the supervisor took the step back, or the
run was cancelled) gets `LeaseLost` and must stop without effect: its transaction rolls back.
"""

from __future__ import annotations

from django.db import connection

from scheduler import transitions
from scheduler.transitions import CheckpointState, Heartbeat


class LeaseLost(Exception):
    """This worker no longer holds the step: whatever it was about to write must not commit."""


def _require_transaction(what: str) -> None:
    if not connection.in_atomic_block:
        raise RuntimeError(f"{what} must run inside the transaction that writes the effect")


def page_begin(*, step_id: int, lease: str) -> CheckpointState:
    """Begin a page: lock the step (lease current) and read its checkpoint; the transaction's
    statement and idle timeouts become the time left until the step's complete_by, so the
    database ends the page (and releases the step) if it would outlast its attempt. Raises
    LeaseLost. Transaction: the caller's - it must also hold the page's effect and `page_commit`."""
    _require_transaction("page_begin")
    checkpoint = transitions.checkpoint_page_begin(step_id=step_id, lease=lease)
    if checkpoint is None:
        raise LeaseLost(f"step {step_id}: lease {lease} is not current")
    return checkpoint


def page_commit(
    *,
    step_id: int,
    lease: str,
    checkpoint: CheckpointState,
    next_start: int,
    rows: int,
    total: int | None,
    last: bool,
) -> None:
    """The page's effect is written: move the checkpoint from where this page began to
    `next_start`. Raises LeaseLost (the caller's transaction must roll back) if it moved
    meanwhile, the lease is gone or the step's complete_by has passed. Transaction: the
    caller's."""
    _require_transaction("page_commit")
    if not transitions.checkpoint_advance(
        step_id=step_id,
        lease=lease,
        page_start=checkpoint.page_start,
        next_start=next_start,
        rows=rows,
        total=total,
        completed=last,
    ):
        raise LeaseLost(f"step {step_id}: checkpoint moved, lease {lease} lost or its deadline passed")


def step_heartbeat(*, step_id: int, lease: str, worker: str) -> Heartbeat:
    """Extend the step's complete_by by its heartbeat window (one conditional UPDATE). A stale
    lease extends nothing and is recorded in the history (late_reply, outcome heartbeat).
    Transaction: its own statement."""
    return transitions.step_extend_by_heartbeat(step_id=step_id, lease=lease, worker=worker)


def heartbeat_finish(*, step_id: int, lease: str) -> None:
    """Mark the step's HeartbeatStatus completed, holding the step while its lease is current. Raises
    LeaseLost. Transaction: the caller's, which then writes the effect and replies success."""
    _require_transaction("heartbeat_finish")
    if not transitions.heartbeat_complete(step_id=step_id, lease=lease):
        raise LeaseLost(f"step {step_id}: lease {lease} is not current")

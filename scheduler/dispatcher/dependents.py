"""Firing a job's dependents when its occurrence ends (issue 30, item 1): the settle's second
half. A parent's occurrence T has an outcome once its run has ended and no retry follows
(completed: succeeded; failed or compensated with its retries spent: failed; cancelled:
cancelled). Each edge out of the parent adds the parent to its child's gate for T - blocked
when the outcome is not the edge's condition, with a history row on the child saying why - and
a gate every parent of the child has reached, unblocked, queues the child's run for T (reason
`dependency`; the dispatcher starts it like any queued row). Exactly once: the settle is once per
run (`job_settled`), the gate is UNIQUE (child, time) and fired under its row lock, the queued row
is the occurrence's UNIQUE (job, time, attempt). The rules: `scheduler/jobs.md`, "Dependencies".
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduler.models import DependencyCondition, DependencyOutcome, Run

from . import transitions
from .transitions import Edge, EndedRun, HistoryRow

# Occurrences started by a backfill do not fire their dependents unless it asked for them
# (`job_backfill(..., dependents=True)` queues them with BACKFILL_WITH_DEPENDENTS).
BACKFILL_ALONE = "backfill"
BACKFILL_WITH_DEPENDENTS = "backfill_deps"

_OUTCOMES = {
    Run.State.COMPLETED: DependencyOutcome.SUCCEEDED,
    Run.State.FAILED: DependencyOutcome.FAILED,
    Run.State.COMPENSATED: DependencyOutcome.FAILED,
    Run.State.CANCELLED: DependencyOutcome.CANCELLED,
}


def outcome_of(state: str) -> str:
    """How an ended run's occurrence ended, as its dependents see it."""
    return str(_OUTCOMES[Run.State(state)])


def condition_met(condition: str, outcome: str) -> bool:
    """The one rule: does an edge with `condition` let its child run after `outcome`? A
    cancelled occurrence (paused, deleted, skipped for backlog) neither succeeded nor failed:
    it lets no child run."""
    if outcome == DependencyOutcome.CANCELLED:
        return False
    if condition == DependencyCondition.ON_EITHER:
        return True
    return (condition == DependencyCondition.ON_SUCCESS) == (outcome == DependencyOutcome.SUCCEEDED)


@dataclass
class DependentsResult:
    arrived: int = 0
    fired: int = 0
    blocked: int = 0


def dependents_settle(
    *, ended: Sequence[EndedRun], retried: Collection[Any], worker: str, at: datetime
) -> DependentsResult:
    """The ended runs' final outcomes (not in `retried`) into their children's gates; complete
    gates fire. Transaction: the settle's, which holds the parents (NO KEY UPDATE). Without an
    edge out of any of them: one read."""
    result = DependentsResult()
    final = [r for r in ended if r.run_id not in retried and r.scheduled_for is not None]
    edges = transitions.dependency_edges_from(parent_ids=sorted({r.job_id for r in final}))
    if not edges:
        return result
    out: dict[int, list[Edge]] = {}
    for edge in edges:
        out.setdefault(edge.parent_id, []).append(edge)
    final = [r for r in final if r.job_id in out]
    reasons = transitions.job_runs_start_reason(run_ids=[r.run_id for r in final])
    gates: dict[tuple[int, datetime], tuple[set[int], list[str]]] = {}
    records: dict[int, tuple[int, str, datetime, bool]] = {}
    history: list[HistoryRow] = []
    for run in final:
        if reasons.get(run.run_id) == BACKFILL_ALONE:
            continue
        assert run.scheduled_for is not None
        outcome = outcome_of(run.state)
        for edge in out[run.job_id]:
            met = condition_met(edge.condition, outcome)
            arrived, blocked = gates.setdefault((edge.child_id, run.scheduled_for), (set(), []))
            arrived.add(edge.parent_id)
            if edge.id not in records or records[edge.id][2] <= run.scheduled_for:
                records[edge.id] = (edge.id, outcome, run.scheduled_for, met)
            if not met:
                why = (
                    f"not fired: parent job '{edge.parent_name}' (#{edge.parent_id}) ended {outcome} "
                    f"for {run.scheduled_for.isoformat()}; the edge runs this job {edge.condition}"
                )
                blocked.append(why)
                history.append(_blocked_row(edge, run, outcome, why))
    result.arrived = len(gates)
    result.blocked = len(history)
    if gates:
        transitions.dependency_children_share(ids=[child for child, _ in gates])
        now = transitions.dependency_gates_arrive(
            arrivals=[
                (child, time, sorted(arrived), blocked[0] if blocked else "")
                for (child, time), (arrived, blocked) in sorted(gates.items())
            ]
        )
        parents_of = {edge.child_id: set(edge.parents) for edge in edges}
        complete = [
            (g.child_id, g.logical_time)
            for g in now
            if not g.blocked and g.fired_at is None and parents_of[g.child_id] <= g.arrived
        ]
        result.fired = len(transitions.dependency_gates_fire(gates=complete))
    transitions.dependency_edges_record(outcomes=list(records.values()))
    transitions.job_history_record(rows=history, worker=worker, at=at)
    return result


def _blocked_row(edge: Edge, run: EndedRun, outcome: str, why: str) -> HistoryRow:
    assert run.scheduled_for is not None
    return HistoryRow(
        job_id=edge.child_id,
        status="skipped",
        scheduled_for=run.scheduled_for,
        retry_count=0,
        detail={
            "reason": why,
            "parent_job_id": edge.parent_id,
            "parent_run_id": str(run.run_id),
            "parent_outcome": outcome,
            "condition": edge.condition,
        },
    )

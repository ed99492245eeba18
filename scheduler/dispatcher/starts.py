"""Starting a firing's runs: each start's input validated again and who may run its workflow
asked again (at every firing, not only when the job was saved), then the runs written in bulk.
Changes when the rule for starting a job's run changes; `FiringPlan.apply` calls it.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from scheduler.models import TaskExecutionHistory
from scheduler.permissions import users_staff_may
from scheduler.workflows import WorkflowInputError, workflow_permitted

from . import transitions

if TYPE_CHECKING:
    from .firing import _Start

logger = logging.getLogger(__name__)

History = TaskExecutionHistory


def runs_start(*, starts: list[_Start], history: list[transitions.HistoryRow]) -> list[tuple[uuid.UUID, str]]:
    """The runs of `starts` that may start, written in one statement; each start's firing gets
    its run id, or "skipped" and a row appended to `history` saying why. Returns (run id,
    reason) of each run opened. Transaction: the caller's."""
    # The engine's services, imported here: the engine's services package imports the job
    # services, which import this package (a cycle at import time, none at run time).
    from scheduler.services.submit import RunSpec, run_validate_input, runs_submit_many

    specs: list[RunSpec] = []
    started: list[_Start] = []
    cleaned: dict[int, Any] = {}
    for start in starts:
        job = start.job
        if job.id not in cleaned:
            try:
                cleaned[job.id] = run_validate_input(workflow=job.workflow, input=job.input)
            except WorkflowInputError as exc:
                cleaned[job.id] = exc
    # Who may run staff-only work is asked at every firing, not only when the job was saved:
    # a workflow that became staff-only, or an owner who lost the staff-work permission
    # (scheduler/permissions.py), stops the job's runs; a workflow that is no job target
    # never starts from a job. One query per batch, none when every start is customer work.
    staff = users_staff_may(
        user_ids={
            s.job.owner_id
            for s in starts
            if isinstance(cleaned[s.job.id], tuple) and not cleaned[s.job.id][0].customer_schedulable
        }
    )
    for start in starts:
        job, firing = start.job, start.firing
        value = cleaned[job.id]
        if (refused := _refusal(start, value, owner_is_staff=job.owner_id in staff)) is not None:
            firing.outcome, firing.reason = "skipped", refused.detail["reason"]
            history.append(refused)
            continue
        definition, input_ = value
        specs.append(
            RunSpec(
                definition=definition,
                input=input_,
                owner_id=job.owner_id,
                priority=job.priority,
                correlation_id=f"job:{job.id}",
                job_id=job.id,
                scheduled_for=firing.scheduled_for,
                job_attempt=firing.attempt,
            )
        )
        started.append(start)
    # The runs (one statement), then their occurrences' "started" history rows (one).
    written = runs_submit_many(specs)
    opened: list[tuple[uuid.UUID, str]] = []
    for start, new_run_id in zip(started, written, strict=True):
        if new_run_id is None:
            # The occurrence already had a run: cannot happen while its row is locked; the
            # unique constraint is the net (the statement skips it, nothing is written).
            logger.error(
                "job %s occurrence %s attempt %s already has a run",
                start.job.id,
                start.firing.scheduled_for,
                start.firing.attempt,
            )
            start.firing.outcome, start.firing.reason = "skipped", "already ran"
            continue
        start.firing.run_id = new_run_id
        opened.append((new_run_id, start.reason))
    return opened


def _refusal(start: _Start, value: Any, *, owner_is_staff: bool) -> transitions.HistoryRow | None:
    """The history row of a start that may not run - its workflow not permitted to the job's
    owner (SKIPPED), or its input no longer valid (FAILED) - or None when it may."""
    job, firing = start.job, start.firing
    if not isinstance(value, WorkflowInputError) and not workflow_permitted(value[0], staff=owner_is_staff):
        reason = (
            f"not permitted: {job.workflow!r} is staff-only work and the job's owner is not "
            "staff holding the staff-work permission"
            if value[0].job_target
            else f"not permitted: {job.workflow!r} is internal and never a job"
        )
        return transitions.HistoryRow(
            job.id,
            History.Status.SKIPPED,
            firing.scheduled_for,
            firing.attempt,
            {"reason": reason, "workflow": job.workflow},
        )
    if isinstance(value, WorkflowInputError):
        return transitions.HistoryRow(
            job.id,
            History.Status.FAILED,
            firing.scheduled_for,
            firing.attempt,
            {"reason": f"input no longer valid: {value}"},
            error=str(value)[:4000],
        )
    return None

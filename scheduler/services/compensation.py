"""Compensation and cancellation: undo a run's completed work in reverse order.

Compensation steps are ordinary steps (claimed, deadlined, supervised). The transitions here
are `run_compensate`, `step_cancel_unstarted`, `step_stop`, `step_mark_compensating`,
`run_finish_compensation`, `run_resume_compensation` and `step_resume` (scheduler.transitions).
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime

from django.db import OperationalError, connection, transaction

from scheduler import clock, transitions
from scheduler.keys import KeyChoice, step_key_choice
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.workflows import get_workflow

from .dispatch import scheduler_kick_enqueue
from .events import event_record, events_announce
from .submit import COMPENSATION_SEQ_BASE, step_advance_built, step_context, step_new


class RunNotCancellable(Exception):
    pass


def run_compensate(*, run_id: uuid.UUID | str, reason: str, cancel: bool = False) -> bool:
    """Start undoing a run: cancel the forward steps that have not run, stop the one in flight,
    and create one compensation step per forward step that may have had an effect, in reverse
    order (the first Pending, the rest Waiting).

    A forward step "may have had an effect" if it was ever claimed, unless the remote refused it
    with a permanent error. Compensations are idempotent on the remote side, so undoing a step
    whose effect never happened is a harmless no-op. A step stopped in flight is compensated only
    after its old complete-by, when its agent has given up.

    Returns False if the run was not Pending/Running (already compensating or finished).
    Transaction: its own atomic block (nests in the caller's); the run's transition to
    Compensating comes first and holds the run row, the forward steps are locked before they
    are read, so a reply racing with this is refused by its fence.
    """
    with transaction.atomic():
        if transitions.run_mark_compensating(run_id=run_id, reason=reason, cancel=cancel) is None:
            return False
        run = Run.objects.get(pk=run_id)
        forward = list(
            Step.objects.select_for_update().filter(run_id=run.id, kind=Step.Kind.FORWARD).order_by("seq")
        )
        # What may have had an effect: a processed step; an errored one some attempt of which
        # reached the service (not a permanent refusal: the service said no to that key); one
        # cancelled while waiting for a retry after such an attempt; one stopped in flight (its
        # agent may be calling right now). Steps that were tried but never reached their
        # service (open breaker, connection refused, never started) had no effect: skipped.
        undo_ids = {
            s.pk
            for s in forward
            if s.process_state == Step.State.PROCESSED
            or (s.process_state == Step.State.ERROR and not s.error_permanent and s.reached)
        }
        undo_ids |= {pk for pk, reached in transitions.step_cancel_unstarted(run_id=run.id) if reached}
        # A step stopped in flight is undone after its old complete_by (database clock), when
        # its agent has given up; otherwise the compensation is due at once (db_default).
        wait_until: datetime | None = None
        for pk, complete_by in transitions.step_stop(run_id=run.id, reason=reason):
            undo_ids.add(pk)
            wait_until = complete_by if wait_until is None else max(wait_until, complete_by)
        skipped = [s for s in forward if s.pk not in undo_ids and s.attempts > 0 and not s.error_permanent]

        compensations = _compensations_create(run, forward, undo_ids=undo_ids, wait_until=wait_until)
        for s in skipped:
            event_record(
                run_id=run.id,
                type=RunEvent.Type.COMPENSATION_SKIPPED,
                observed=run.observed,
                step_id=s.pk,
                step=s.name,
                reason="no attempt reached the service: nothing to undo",
            )
        event_record(
            run_id=run.id,
            type=RunEvent.Type.COMPENSATING,
            observed=run.observed,
            reason=reason[:500],
            steps=[c.name for c in compensations],
        )
        if compensations:
            transaction.on_commit(scheduler_kick_enqueue)
        else:
            run_finish_compensation(run=run)
    return True


def _compensations_create(
    run: Run, forward: list[Step], *, undo_ids: set[int], wait_until: datetime | None
) -> list[Step]:
    """One compensation step per forward step in `undo_ids` that has one, in reverse order (the
    first Pending, the rest Waiting; none due before `wait_until`), written with their payloads,
    and their forward steps marked Compensating. The caller's transaction."""
    definition = get_workflow(run.workflow)
    compensations: list[Step] = []
    for s in reversed(forward):
        comp_def = definition.step(s.name).compensation
        if s.pk not in undo_ids or comp_def is None:
            continue
        comp = step_new(
            run,
            comp_def,
            seq=COMPENSATION_SEQ_BASE + len(compensations),
            kind=Step.Kind.COMPENSATION,
            state=Step.State.PENDING if not compensations else Step.State.WAITING,
        )
        comp.compensates = s
        if wait_until is not None:
            comp.not_before = wait_until
        compensations.append(comp)
    if compensations:
        # Every forward step is finished, so every compensation's payload can be built now.
        ctx = step_context(run, forward + compensations)
        for comp in compensations:
            comp.payload = definition.step(comp.name).payload(ctx)
        Step.objects.bulk_create(compensations)
        transitions.step_mark_compensating(
            step_ids=[c.compensates_id for c in compensations if c.compensates_id]
        )

    return compensations


def run_finish_compensation(*, run: Run) -> None:
    """Nothing (left) to undo: the run ends Compensated, or Cancelled if a cancel asked."""
    finished = transitions.run_end_compensation(run_id=run.id)
    if finished is not None:
        state, correlation_id = finished
        event_record(
            run_id=run.id,
            type=RunEvent.Type.CANCELLED if state == Run.State.CANCELLED else RunEvent.Type.COMPENSATED,
            observed=run.observed,
            correlation_id=correlation_id,
        )


DEADLOCK_DETECTED = "40P01"


def run_cancel(*, run_id: uuid.UUID | str, actor: str) -> Run:
    """Cancel a run that has not finished: work not started is dropped, work done is compensated;
    the run ends Cancelled. Raises RunNotCancellable for a finished or already-undoing run.

    A cancel locks the run's steps while agents' replies may be moving the same rows: when
    PostgreSQL breaks a deadlock by aborting the cancel's transaction (seen in CI), the cancel is
    tried again - up to three times, and only as the outermost transaction (inside a caller's,
    the caller's whole transaction is what must be retried)."""
    for attempt in range(3):
        try:
            return _run_cancel_once(run_id=run_id, actor=actor)
        except OperationalError as exc:
            deadlock = getattr(exc.__cause__, "sqlstate", None) == DEADLOCK_DETECTED
            if not deadlock or connection.in_atomic_block or attempt == 2:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")


def _run_cancel_once(*, run_id: uuid.UUID | str, actor: str) -> Run:
    with transaction.atomic():
        if not run_compensate(run_id=run_id, reason=f"cancelled by {actor}", cancel=True):
            run = Run.objects.get(pk=run_id)
            raise RunNotCancellable(
                f"run is {run.get_state_display()}; only pending or running runs can be cancelled"
            )
    return Run.objects.get(pk=run_id)


def run_resume_compensation(*, run_id: uuid.UUID | str, actor: str) -> int:
    """Operator action for a Failed run: put its failed compensation steps back to Pending with a
    fresh failure budget, and the run back to Compensating. Each step refused for good sends
    under a new idempotency key generation, the others keep theirs (`scheduler.keys`, issue
    28); its history row says which. Returns the number of steps resumed. Transaction: one; the
    run's row is held from its transition on, so its steps in Error cannot change meanwhile."""
    with transaction.atomic():
        if not transitions.run_reopen_compensation(run_id=run_id):
            run = Run.objects.get(pk=run_id)
            raise RunNotCancellable(
                f"run is {run.get_state_display()}; only failed runs can resume compensation"
            )
        run = Run.objects.get(pk=run_id)
        errored = Step.objects.filter(
            run_id=run.id, kind=Step.Kind.COMPENSATION, process_state=Step.State.ERROR
        ).select_for_update()
        choices = {s.pk: step_key_choice(s) for s in errored}
        resumed = transitions.step_resume(run_id=run.id, renew=list(choices.values()))
        now = clock.now()
        TaskExecutionHistory.objects.bulk_create(
            [
                TaskExecutionHistory(
                    step_id=step_id,
                    run=run,
                    kind=TaskExecutionHistory.Kind.OPERATOR,
                    status=TaskExecutionHistory.Status.ACTION,
                    worker=actor,
                    started_at=now,
                    ended_at=now,
                    detail={"action": "resume_compensation", **_key_detail(choices.get(step_id))},
                )
                for step_id, _ in resumed
            ]
        )
        renewed = [name for step_id, name in resumed if step_id in choices and choices[step_id].renewed]
        event_record(
            run_id=run.id,
            type=RunEvent.Type.COMPENSATING,
            observed=run.observed,
            reason=f"resumed by {actor}"
            + (f"; under a new idempotency key: {', '.join(renewed)}" if renewed else ""),
            steps=[name for _, name in resumed],
        )
        transaction.on_commit(scheduler_kick_enqueue)
    return len(resumed)


def _key_detail(choice: KeyChoice | None) -> dict[str, object]:
    return {} if choice is None else {**choice.as_detail(), "note": choice.note}


class StepNotMarkable(Exception):
    pass


def step_compensation_mark_done(*, step_id: int, actor: str, reason: str) -> None:
    """Operator action: a compensation step is done by hand (the refund was made another way,
    the stock released by a person), with the reason. The run goes on as after a success: the
    next compensation, or Compensated. Raises StepNotMarkable unless the step is a compensation
    not yet done of a run that is Compensating or Failed, or the reason is empty."""
    if not reason.strip():
        raise StepNotMarkable("say why the compensation is done by hand")
    with transaction.atomic():
        done = transitions.step_mark_done(step_id=step_id, actor=actor, reason=reason.strip())
        if not done.accepted:
            raise StepNotMarkable(
                "only a compensation step not yet done, of a compensating or failed run, can be marked done"
            )
        events_announce(done.events)
        if done.needs_payload is not None:
            step_advance_built(step_id=done.needs_payload)
        transaction.on_commit(scheduler_kick_enqueue)


def run_give_up(*, run_id: uuid.UUID | str, actor: str, reason: str) -> None:
    """Operator action: stop compensating a run that cannot be undone by the engine; it ends
    Failed with the reason (Compensating -> Failed). Raises RunNotCancellable otherwise."""
    if not reason.strip():
        raise RunNotCancellable("say why the run is given up")
    with transaction.atomic():
        if not transitions.run_fail(run_id=run_id, reason=f"given up by {actor}: {reason.strip()}"):
            run = Run.objects.get(pk=run_id)
            raise RunNotCancellable(
                f"run is {run.get_state_display()}; only a compensating run can be given up"
            )
        run = Run.objects.get(pk=run_id)
        event_record(
            run_id=run.id, type=RunEvent.Type.FAILED, observed=run.observed, reason=f"given up by {actor}"
        )

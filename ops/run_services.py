"""The operator's audited actions on a run or a step: the pattern's last line of defence - fix the
cause, then resubmit, compensate, cancel, resume, give up, retry or mark a compensation done
(issue 21; the operator's room since issue 27).

Every action is a service here, keyword-only, taking the acting user, a reason (mandatory) and
`seen`: the row's `updated_at` when the confirmation page was shown. A row changed since (a
reply, the sweep, another operator) refuses the action as stale and writes nothing. Whether the
action fits the run is asked of the one selector (`ops.run_actions.run_actions_fitting`), with
the run locked; the state change itself is the engine's (`ACTIONS[...].engine`, or a transition
of `scheduler/transitions.py`, one conditional statement each, which stays the concurrency
check). What is written beside it - the history row, the run event, the audit entry - commits in
the same transaction, so a refused action leaves nothing behind. Permissions are the caller's to
check (the admin maps each action to its permission: `ACTIONS[...].permission`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from scheduler import transitions
from scheduler.keys import KeyChoice, step_key_choice
from scheduler.models import Run, RunEvent, Step
from scheduler.services import (
    RunNotCancellable,
    StepNotMarkable,
    event_record,
    run_submit,
    scheduler_kick_enqueue,
    step_compensation_mark_done,
)
from scheduler.workflows import WorkflowInputError

from .audit import OperatorRefused, actor_name, audit_record, history_record, reason_checked, stale_or_state
from .models import OperatorAction
from .run_actions import ACTIONS, run_actions_fitting

Action = OperatorAction.Action

FORWARD_NOT_IN_PLACE = (
    "a forward step is resubmitted in place only while its run is compensating and nothing has "
    "been undone yet; once its compensation has started, let it finish and resubmit the run (a "
    "new run of the same input, linked to this one)"
)

COMPENSATED_RESUBMIT_RUN = (
    "its run is compensated: resubmit the run instead (a new run of the same input, linked to this one)"
)


def _refuse_unless_fits(
    *,
    action: str,
    run: Run,
    row: Run | Step | None,
    seen: datetime,
    step_id: int | None = None,
    words: str = "",
) -> None:
    """Refuse (nothing written) unless `row` is as it was shown and the selector says `action`
    fits `run` (on `step_id`) now. The caller holds the run locked."""
    if row is None or row.updated_at != seen:
        raise stale_or_state(row, seen, "")
    fitting = run_actions_fitting(run=run, step_id=step_id, actions=(action,))
    if not any(step_id is None or (f.step is not None and f.step.pk == step_id) for f in fitting):
        raise OperatorRefused(
            "state", words or f"run is {run.get_state_display()}; {ACTIONS[action].refusal}"
        )


def _run_locked(run_id: uuid.UUID | str) -> Run:
    run = Run.objects.select_for_update().filter(pk=run_id).first()
    if run is None:
        raise OperatorRefused("state", "no such run")
    return run


def run_operate(
    *, action: str, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """A run-level action of the table (cancel, compensate, resume, give up): the run as shown
    (`seen`) locked, the selector asked, the action's engine service called, and the audit entry,
    in one transaction. A refusal (stale, not fitting, or the engine's RunNotCancellable) writes
    nothing, not even the audit."""
    spec = ACTIONS[action]
    if spec.engine is None:
        raise OperatorRefused("input", f"{action} is not an action on a run alone")
    why = reason_checked(reason)
    with transaction.atomic():
        run = _run_locked(run_id)
        _refuse_unless_fits(action=action, run=run, row=run, seen=seen)
        try:
            spec.engine(run, actor_name(user), why)
        except RunNotCancellable as exc:
            raise OperatorRefused("state", str(exc)) from exc
        return audit_record(action=spec.audit, user=user, reason=why, run_id=run.pk)


def run_cancel_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Cancel a Pending or Running run (work not started dropped, work done compensated, the run
    ends Cancelled), audited."""
    return run_operate(action="cancel", run_id=run_id, user=user, reason=reason, seen=seen)


def run_compensate_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Compensate a Pending or Running run on purpose (the operator knows it must not finish):
    the same undo as after a failed step; the run ends Compensated (not Cancelled), audited."""
    return run_operate(action="compensate", run_id=run_id, user=user, reason=reason, seen=seen)


def run_resume_compensation_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Resume a Failed run's compensation (its compensation steps in Error back to Pending with
    a fresh budget, the run Compensating), audited."""
    return run_operate(action="resume", run_id=run_id, user=user, reason=reason, seen=seen)


def run_give_up_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Give a Compensating run up (it ends Failed with the reason, nothing more undone), audited."""
    return run_operate(action="give_up", run_id=run_id, user=user, reason=reason, seen=seen)


def step_resubmit_by_operator(
    *, step_id: int, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Resubmit a step in Error: back to Pending, failure count reset. Its idempotency key:
    `scheduler.keys.step_key_choice` decides - after a definitive refusal (nothing happened)
    the next key generation, else the same key. The history row, the run event and the audit
    entry say which (issue 28).

    - A compensation step of a Failed run: the run goes back to Compensating.
    - A forward step of a run that began compensating but has undone nothing yet: in place - the
      run back to Running, its compensations dropped (`transitions.step_resubmit_in_place`).
    - A forward step whose run is Compensated (or whose compensation has started): refused -
      what the operator resubmits then is the run (`run_resubmit`).

    Refused (OperatorRefused, nothing written): no reason; not fitting (the selector); the step
    changed since the page was shown. Transaction: one; the run row is locked first (the order
    every transition takes), then a forward step's compensation steps (the claim skips locked
    rows: none starts meanwhile), then the step."""
    why = reason_checked(reason)
    step = Step.objects.filter(pk=step_id).only("id", "run_id", "kind").first()
    if step is None:
        raise OperatorRefused("state", "no such step")
    forward = step.kind == Step.Kind.FORWARD
    with transaction.atomic():
        run = _run_locked(step.run_id)
        if forward:
            list(Step.objects.select_for_update().filter(run_id=run.pk, kind=Step.Kind.COMPENSATION))
        locked = Step.objects.select_for_update().filter(pk=step_id).first()
        words = ""
        if forward:
            words = COMPENSATED_RESUBMIT_RUN if run.state == Run.State.COMPENSATED else FORWARD_NOT_IN_PLACE
        _refuse_unless_fits(
            action="resubmit_step", run=run, row=locked, seen=seen, step_id=step_id, words=words
        )
        assert locked is not None  # _refuse_unless_fits refused a missing row
        key = step_key_choice(locked)
        if forward:
            detail = _forward_resubmit_in_place(run=run, step_id=step_id, user=user, seen=seen, key=key)
        else:
            detail = _compensation_resubmit(run=run, step_id=step_id, user=user, seen=seen, key=key)
        return _step_action_recorded(Action.RESUBMIT_STEP, run.pk, step_id, user, why, key, detail)


def _step_action_recorded(
    action: str,
    run_id: uuid.UUID,
    step_id: int,
    user: AbstractBaseUser,
    reason: str,
    key: KeyChoice,
    detail: dict[str, Any],
) -> OperatorAction:
    """What a step action that sets the step's key writes beside its transition: the history row
    (which key, and why), the audit entry, and the scheduler's kick after the commit."""
    history_record(run_id=run_id, step_id=step_id, user=user, action=action, reason=reason, key=key)
    detail = {**detail, **key.as_detail()}
    entry = audit_record(
        action=action, user=user, reason=reason, run_id=run_id, step_id=step_id, detail=detail
    )
    transaction.on_commit(scheduler_kick_enqueue)
    return entry


def _forward_resubmit_in_place(
    *, run: Run, step_id: int, user: AbstractBaseUser, seen: datetime, key: KeyChoice
) -> dict[str, Any]:
    moved = transitions.step_resubmit_in_place(step_id=step_id, seen=seen, key=key)
    if moved is None:
        raise stale_or_state(Step.objects.filter(pk=step_id).first(), seen, FORWARD_NOT_IN_PLACE)
    _run_id, name, dropped = moved
    event_record(
        run_id=run.pk,
        type=RunEvent.Type.STEP_RETRYING,
        observed=run.observed,
        step_id=step_id,
        step=name,
        reason=f"{key.note} (by {actor_name(user)}); compensation called off",
    )
    return {"in_place": True, "compensations_dropped": dropped}


def _compensation_resubmit(
    *, run: Run, step_id: int, user: AbstractBaseUser, seen: datetime, key: KeyChoice
) -> dict[str, Any]:
    moved = transitions.step_resubmit(step_id=step_id, seen=seen, key=key)
    if moved is None:
        raise stale_or_state(Step.objects.filter(pk=step_id).first(), seen, ACTIONS["resubmit_step"].refusal)
    transitions.run_reopen_compensation(run_id=run.pk)
    event_record(
        run_id=run.pk,
        type=RunEvent.Type.COMPENSATING,
        observed=run.observed,
        reason=f"step {moved[1]} {key.note} (by {actor_name(user)})",
        steps=[moved[1]],
    )
    return {}


def run_resubmit(
    *,
    run_id: uuid.UUID | str,
    user: AbstractBaseUser,
    reason: str,
    seen: datetime,
    input: Mapping[str, Any] | None = None,
) -> OperatorAction:
    """A new run of a Compensated run's input (or of `input`, an edited copy, validated by the
    workflow like a new submission), linked to the old run (the audit entry's `new_run`). Same
    workflow, owner, priority, correlation id and observers; not a job occurrence.

    Refused: no reason; not fitting (not Compensated, or resubmitted before: one new run per old
    run); the run changed since the page was shown; the edited input invalid ("input", errors by
    field). Nothing is written when refused. Transaction: one (the old run locked)."""
    why = reason_checked(reason)
    with transaction.atomic():
        run = _run_locked(run_id)
        earlier = OperatorAction.objects.filter(run=run, action=Action.RESUBMIT_RUN).first()
        words = "" if earlier is None else f"run was already resubmitted as run {earlier.new_run_id}"
        _refuse_unless_fits(action="resubmit_run", run=run, row=run, seen=seen, words=words)
        edited = input is not None and dict(input) != run.input
        try:
            new = run_submit(
                workflow=run.workflow,
                input=run.input if input is None else input,
                owner_id=run.owner_id,
                priority=run.priority,
                correlation_id=run.correlation_id,
                observed=run.observed,
            )
        except WorkflowInputError as exc:
            raise OperatorRefused("input", f"the input is not valid: {exc}", errors=exc.errors) from exc
        return audit_record(
            action=Action.RESUBMIT_RUN,
            user=user,
            reason=why,
            run_id=run.pk,
            new_run_id=new.pk,
            detail={"input_edited": edited, "new_run": str(new.pk)},
        )


def _step_action_locked(step_id: int) -> tuple[Run, Step]:
    """The step's run locked, then the step (the order every transition takes)."""
    step = Step.objects.filter(pk=step_id).only("id", "run_id").first()
    if step is None:
        raise OperatorRefused("state", "no such step")
    run = _run_locked(step.run_id)
    locked = Step.objects.select_for_update().filter(pk=step_id).first()
    if locked is None:
        raise OperatorRefused("state", "no such step")
    return run, locked


def step_compensation_retry_by_operator(
    *, step_id: int, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Retry a failing compensation step now: one waiting out its backoff after failures is made
    due at once with a fresh failure count, after the operator fixed the cause. Its failures were
    ambiguous, so it keeps its idempotency key (`scheduler.keys`; the history row records it).
    Refused: no reason, not fitting, stale form."""
    why = reason_checked(reason)
    with transaction.atomic():
        run, step = _step_action_locked(step_id)
        _refuse_unless_fits(action="retry_compensation", run=run, row=step, seen=seen, step_id=step_id)
        moved = transitions.step_compensation_retry(step_id=step_id, seen=seen)
        if moved is None:
            raise stale_or_state(step, seen, ACTIONS["retry_compensation"].refusal)
        key = step_key_choice(Step.objects.get(pk=step_id))
        return _step_action_recorded(Action.RETRY_COMPENSATION, run.pk, step_id, user, why, key, {})


def step_compensation_mark_done_by_operator(
    *, step_id: int, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Mark a compensation done by hand (the refund was made another way), reason mandatory: the
    run goes on as after the step's success (the next compensation, or Compensated). Refused:
    no reason, not fitting, stale form. Transaction: one; the run, then the step, locked."""
    why = reason_checked(reason)
    with transaction.atomic():
        run, step = _step_action_locked(step_id)
        _refuse_unless_fits(action="mark_done", run=run, row=step, seen=seen, step_id=step_id)
        try:
            step_compensation_mark_done(step_id=step_id, actor=actor_name(user), reason=why)
        except StepNotMarkable as exc:
            raise OperatorRefused("state", str(exc)) from exc
        return audit_record(
            action=Action.MARK_COMPENSATION_DONE, user=user, reason=why, run_id=run.pk, step_id=step_id
        )

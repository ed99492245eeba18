"""What an operator does from the admin: acknowledge alerts, and the pattern's last line of
defence - fix the cause, then resubmit (issue 21).

Every action is a service here, keyword-only, taking the acting user, a reason (mandatory) and,
for a row shown on a confirmation page, `seen`: that row's `updated_at` when the page was shown.
A row changed since (a reply, the sweep, another operator) refuses the action as stale and
writes nothing. Each state change is one transition of the scheduler (`scheduler/transitions.py`,
one conditional statement each); what is written beside it - the history row, the run event,
the audit entry (`OperatorAction`: who, when, what, why) - commits in the same transaction, so
a refused action leaves nothing behind. Permissions are the caller's to check (the admin maps
each action to its custom permission, `OperatorAction.Meta.permissions`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from scheduler import transitions
from scheduler.keys import KeyChoice, step_key_choice, step_refusal_repeats
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.services import (
    RunNotCancellable,
    StepNotMarkable,
    event_record,
    run_cancel,
    run_compensate,
    run_give_up,
    run_resume_compensation,
    run_submit,
    scheduler_kick_enqueue,
    step_compensation_mark_done,
)
from scheduler.workflows import WorkflowInputError

from .models import OperatorAction

logger = logging.getLogger("sas.alerts")
audit_logger = logging.getLogger("sas.operator")

Action = OperatorAction.Action

# A bulk resubmission acts on at most this many steps (the dry run shows the same cap).
BULK_LIMIT = 500
REASON_MAX = 2000


class OperatorRefused(Exception):
    """The action was refused and nothing was written. `code`: "state" (the row is not in a
    state the action applies to), "stale" (it changed since the page was shown), "reason" (no
    reason given), "input" (the edited input is invalid: `errors` by field)."""

    def __init__(self, code: str, message: str, errors: Mapping[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.errors = dict(errors or {})


def actor_name(user: AbstractBaseUser) -> str:
    """How an operator is named in the history, the events and the audit: admin:<username>."""
    return f"admin:{user.get_username()}"


# ---------------------------------------------------------------------------------------------
# Helpers: the reason, the stale check, the audit entry
# ---------------------------------------------------------------------------------------------


def _reason(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise OperatorRefused("reason", "say why (the reason is required and kept in the audit)")
    if len(text) > REASON_MAX:
        raise OperatorRefused("reason", f"the reason is at most {REASON_MAX} characters")
    if "\x00" in text:
        # PostgreSQL's text refuses NUL: refused here, not as a DataError at the INSERT (a 500
        # in the admin). Found by tests/test_properties_bad_input.py (issue 22).
        raise OperatorRefused("reason", "the reason may not contain a NUL character")
    return text


def _stale_or_state(row: Step | Run | None, seen: datetime, state_message: str) -> OperatorRefused:
    """Why a conditional statement touched nothing: the row changed since the form was shown
    (stale), or it is as shown but not in a state the action applies to."""
    if row is None:
        return OperatorRefused("state", "no such row")
    if row.updated_at != seen:
        return OperatorRefused(
            "stale", "it changed since the page was shown (nothing was done): look again and confirm"
        )
    return OperatorRefused("state", state_message)


def _audit(
    *,
    action: str,
    user: AbstractBaseUser,
    reason: str,
    run_id: uuid.UUID | str | None = None,
    step_id: int | None = None,
    new_run_id: uuid.UUID | str | None = None,
    target: str = "",
    detail: dict[str, Any] | None = None,
) -> OperatorAction:
    entry = OperatorAction.objects.create(
        action=action,
        run_id=run_id,
        step_id=step_id,
        new_run_id=new_run_id,
        actor_id=user.pk,
        actor_name=actor_name(user),
        reason=reason,
        target=target,
        detail=detail or {},
    )
    audit_logger.info("%s by %s on %s: %s", action, entry.actor_name, run_id or target, reason)
    return entry


def operator_action_record(
    *, action: str, user: AbstractBaseUser, reason: str, target: str, detail: dict[str, Any]
) -> OperatorAction:
    """An audit entry for an action on something that is not a run (a breaker), made by a
    service of a layer above (ops). The reason is checked like every action's."""
    return _audit(action=action, user=user, reason=_reason(reason), target=target, detail=detail)


def _history(
    *,
    run_id: uuid.UUID | str,
    step_id: int,
    user: AbstractBaseUser,
    action: str,
    reason: str,
    key: KeyChoice | None = None,
) -> None:
    """The operator's row in the run's history; with `key`, which idempotency key the step
    sends from now on and why (`KeyChoice.note`, issue 28)."""
    now = timezone.now()
    extra: dict[str, Any] = {} if key is None else {**key.as_detail(), "note": key.note}
    TaskExecutionHistory.objects.create(
        step_id=step_id,
        run_id=run_id,
        kind=TaskExecutionHistory.Kind.OPERATOR,
        status=TaskExecutionHistory.Status.ACTION,
        worker=actor_name(user),
        started_at=now,
        ended_at=now,
        detail={"action": action, "reason": reason[:500], **extra},
    )


def _step_locked(step_id: int) -> Step | None:
    """The step's row, locked until the transaction ends (after its run's: the order every
    transition takes), for the key rule to read as the transition will find it."""
    return Step.objects.select_for_update().filter(pk=step_id).first()


# ---------------------------------------------------------------------------------------------
# The actions
# ---------------------------------------------------------------------------------------------


def step_resubmit(*, step_id: int, user: AbstractBaseUser, reason: str, seen: datetime) -> OperatorAction:
    """Resubmit a step in Error: back to Pending, failure count reset. Its idempotency key:
    `scheduler.keys.step_key_renewable` decides - after a definitive refusal (nothing happened)
    the next key generation, else the same key (the remote side deduplicates whatever may have
    happened). The history row, the run event and the audit entry say which (issue 28).

    - A compensation step of a Failed run: the run goes back to Compensating.
    - A forward step of a run that began compensating but has undone nothing yet (no
      compensation step attempted): in place - the run back to Running, its compensations
      dropped, the steps done before it kept (`transitions.step_resubmit_in_place`).
    - A forward step whose run is Compensated (or whose compensation has started): refused -
      what the operator resubmits then is the run (`run_resubmit`: a new run of the same input,
      or an edited one, linked to this one). Its steps' effects were undone, and their keys
      would be answered from the remote services' idempotency records; an edited input likewise
      needs new keys, so it is offered on the new run only.

    Refused (OperatorRefused, nothing written): no reason; the step or its run not in those
    states; the step changed since the page was shown (`seen` is its updated_at then).
    Transaction: one; the run row is locked first (the order every transition takes), then a
    forward step's compensation steps (the claim skips locked rows: none starts meanwhile)."""
    why = _reason(reason)
    step = Step.objects.filter(pk=step_id).only("id", "run_id", "kind").first()
    if step is None:
        raise OperatorRefused("state", "no such step")
    if step.kind == Step.Kind.FORWARD:
        return _forward_step_resubmit(step_id=step_id, run_id=step.run_id, user=user, why=why, seen=seen)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=step.run_id)
        if run.state != Run.State.FAILED:
            raise OperatorRefused(
                "state",
                f"run is {run.get_state_display()}; only a failed run's compensation step can be resubmitted",
            )
        locked = _step_locked(step_id)
        key = step_key_choice(locked) if locked is not None and locked.updated_at == seen else None
        moved = transitions.step_resubmit(step_id=step_id, seen=seen, key=key)
        if moved is None or key is None:
            raise _stale_or_state(locked, seen, "only a compensation step in Error can be resubmitted")
        transitions.run_reopen_compensation(run_id=run.pk)
        _history(run_id=run.pk, step_id=step_id, user=user, action=Action.RESUBMIT_STEP, reason=why, key=key)
        event_record(
            run_id=run.pk,
            type=RunEvent.Type.COMPENSATING,
            observed=run.observed,
            reason=f"step {moved[1]} {key.note} (by {actor_name(user)})",
            steps=[moved[1]],
        )
        entry = _audit(
            action=Action.RESUBMIT_STEP,
            user=user,
            reason=why,
            run_id=run.pk,
            step_id=step_id,
            detail=key.as_detail(),
        )
        transaction.on_commit(scheduler_kick_enqueue)
    return entry


FORWARD_NOT_IN_PLACE = (
    "a forward step is resubmitted in place only while its run is compensating and nothing has "
    "been undone yet; once its compensation has started, let it finish and resubmit the run (a "
    "new run of the same input, linked to this one)"
)


def forward_step_resubmittable(*, run: Run) -> bool:
    """Whether a forward step in Error of `run` may be resubmitted in place now (the buttons ask;
    the transition decides): the run Compensating, not cancelled, no compensation attempted."""
    return (
        run.state == Run.State.COMPENSATING
        and not run.cancel_requested
        and not run.steps.filter(kind=Step.Kind.COMPENSATION)
        .filter(Q(attempts__gt=0) | ~Q(process_state__in=[Step.State.PENDING, Step.State.WAITING]))
        .exists()
    )


def _forward_step_resubmit(
    *, step_id: int, run_id: uuid.UUID, user: AbstractBaseUser, why: str, seen: datetime
) -> OperatorAction:
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.state == Run.State.COMPENSATED:
            raise OperatorRefused(
                "state",
                "its run is compensated: resubmit the run instead (a new run of the same input, "
                "linked to this one)",
            )
        # Held until commit: the scheduler's claim (SKIP LOCKED) cannot start one meanwhile.
        list(Step.objects.select_for_update().filter(run_id=run.pk, kind=Step.Kind.COMPENSATION))
        locked = _step_locked(step_id)
        key = step_key_choice(locked) if locked is not None and locked.updated_at == seen else None
        moved = transitions.step_resubmit_in_place(step_id=step_id, seen=seen, key=key)
        if moved is None or key is None:
            raise _stale_or_state(locked, seen, FORWARD_NOT_IN_PLACE)
        _run_id, name, dropped = moved
        _history(run_id=run.pk, step_id=step_id, user=user, action=Action.RESUBMIT_STEP, reason=why, key=key)
        event_record(
            run_id=run.pk,
            type=RunEvent.Type.STEP_RETRYING,
            observed=run.observed,
            step_id=step_id,
            step=name,
            reason=f"{key.note} (by {actor_name(user)}); compensation called off",
        )
        entry = _audit(
            action=Action.RESUBMIT_STEP,
            user=user,
            reason=why,
            run_id=run.pk,
            step_id=step_id,
            detail={"in_place": True, "compensations_dropped": dropped, **key.as_detail()},
        )
        transaction.on_commit(scheduler_kick_enqueue)
    return entry


def run_resubmit(
    *,
    run_id: uuid.UUID | str,
    user: AbstractBaseUser,
    reason: str,
    seen: datetime,
    input: Mapping[str, Any] | None = None,
) -> OperatorAction:
    """A new run of a Compensated run's input (or of `input`, an edited copy, validated by the
    workflow like a new submission), linked to the old run (the audit entry's `new_run`; both
    run pages show the link). Same workflow, owner, priority, correlation id and observers; not
    a job occurrence (the job's own retries are the job's).

    Refused: no reason; the run not Compensated; resubmitted before (one new run per old run);
    the run changed since the page was shown; the edited input invalid ("input", errors by
    field). Nothing is written when refused. Transaction: one (the old run locked)."""
    why = _reason(reason)
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise OperatorRefused("state", "no such run")
        if run.updated_at != seen:
            raise _stale_or_state(run, seen, "")
        if run.state != Run.State.COMPENSATED:
            raise OperatorRefused(
                "state", f"run is {run.get_state_display()}; only a compensated run can be run again"
            )
        earlier = OperatorAction.objects.filter(run=run, action=Action.RESUBMIT_RUN).first()
        if earlier is not None:
            raise OperatorRefused("state", f"run was already resubmitted as run {earlier.new_run_id}")
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
        entry = _audit(
            action=Action.RESUBMIT_RUN,
            user=user,
            reason=why,
            run_id=run.pk,
            new_run_id=new.pk,
            detail={"input_edited": edited, "new_run": str(new.pk)},
        )
    return entry


def run_compensate_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Compensate a Pending or Running run on purpose (the operator knows it must not finish):
    the same undo as after a failed step - forward steps not started are dropped, the one in
    flight stopped, the done ones undone in reverse order. The run ends Compensated (not
    Cancelled: nobody cancelled it). Refused: no reason, wrong state, stale form."""
    why = _reason(reason)
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise OperatorRefused("state", "no such run")
        if run.updated_at != seen:
            raise _stale_or_state(run, seen, "")
        if not run_compensate(run_id=run.pk, reason=f"compensated by {actor_name(user)}: {why}"):
            raise OperatorRefused(
                "state", f"run is {run.get_state_display()}; only a pending or running run can be compensated"
            )
        entry = _audit(action=Action.COMPENSATE_RUN, user=user, reason=why, run_id=run.pk)
    return entry


def _run_operate(
    *,
    action: str,
    run_id: uuid.UUID | str,
    user: AbstractBaseUser,
    reason: str,
    seen: datetime,
    call: Callable[[Run, str], object],
) -> OperatorAction:
    """The run as it was shown (`seen`) locked, the scheduler's service `call(run, reason)`, and
    the audit entry, in one transaction: a refusal (RunNotCancellable: wrong state) writes
    nothing, not even the audit."""
    why = _reason(reason)
    with transaction.atomic():
        run = Run.objects.select_for_update().filter(pk=run_id).first()
        if run is None:
            raise OperatorRefused("state", "no such run")
        if run.updated_at != seen:
            raise _stale_or_state(run, seen, "")
        try:
            call(run, why)
        except RunNotCancellable as exc:
            raise OperatorRefused("state", str(exc)) from exc
        entry = _audit(action=action, user=user, reason=why, run_id=run.pk)
    return entry


def run_cancel_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Cancel a Pending or Running run (`run_cancel`: work not started dropped, work done
    compensated, the run ends Cancelled), audited. Refused: no reason, wrong state, stale form."""
    return _run_operate(
        action=Action.CANCEL_RUN,
        run_id=run_id,
        user=user,
        reason=reason,
        seen=seen,
        call=lambda run, why: run_cancel(run_id=run.pk, actor=actor_name(user)),
    )


def run_resume_compensation_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Resume a Failed run's compensation (`run_resume_compensation`: its compensation steps in
    Error back to Pending with a fresh budget, the run Compensating), audited. Refused: no
    reason, wrong state, stale form."""
    return _run_operate(
        action=Action.RESUME_COMPENSATION,
        run_id=run_id,
        user=user,
        reason=reason,
        seen=seen,
        call=lambda run, why: run_resume_compensation(run_id=run.pk, actor=actor_name(user)),
    )


def run_give_up_by_operator(
    *, run_id: uuid.UUID | str, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Give a Compensating run up (`run_give_up`: it ends Failed with the reason, nothing more
    undone), audited. Refused: no reason, wrong state, stale form."""
    return _run_operate(
        action=Action.GIVE_UP_RUN,
        run_id=run_id,
        user=user,
        reason=reason,
        seen=seen,
        call=lambda run, why: run_give_up(run_id=run.pk, actor=actor_name(user), reason=why),
    )


def step_compensation_retry(
    *, step_id: int, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Retry a failing compensation step now: one waiting out its backoff after failures (the
    "compensation keeps failing" alert) is made due at once with a fresh failure count, after
    the operator fixed the cause. (A compensation step already in Error - its run Failed - is
    resubmitted with `step_resubmit`.) Its failures were ambiguous (timeouts, faults that may
    have reached the service), so it keeps its idempotency key: `scheduler.keys` says so for
    every step not refused for good, and the history row records it. Refused: no reason, wrong
    state, stale form."""
    why = _reason(reason)
    with transaction.atomic():
        moved = transitions.step_compensation_retry(step_id=step_id, seen=seen)
        if moved is None:
            raise _stale_or_state(
                Step.objects.filter(pk=step_id).first(),
                seen,
                "only a compensation step waiting to retry after failures can be retried now",
            )
        run_id, _name = moved
        key = step_key_choice(Step.objects.get(pk=step_id))
        _history(
            run_id=run_id, step_id=step_id, user=user, action=Action.RETRY_COMPENSATION, reason=why, key=key
        )
        entry = _audit(
            action=Action.RETRY_COMPENSATION,
            user=user,
            reason=why,
            run_id=run_id,
            step_id=step_id,
            detail=key.as_detail(),
        )
        transaction.on_commit(scheduler_kick_enqueue)
    return entry


def step_compensation_mark_done_by_operator(
    *, step_id: int, user: AbstractBaseUser, reason: str, seen: datetime
) -> OperatorAction:
    """Mark a compensation done by hand (the refund was made another way), reason mandatory: the
    run goes on as after the step's success (the next compensation, or Compensated). Refused:
    no reason, wrong state (not a compensation not yet done of a compensating or failed run),
    stale form. Transaction: one; the step row is locked as seen first."""
    why = _reason(reason)
    with transaction.atomic():
        step = Step.objects.select_for_update().filter(pk=step_id).first()
        if step is None or step.updated_at != seen:
            raise _stale_or_state(step, seen, "")
        try:
            step_compensation_mark_done(step_id=step_id, actor=actor_name(user), reason=why)
        except StepNotMarkable as exc:
            raise OperatorRefused("state", str(exc)) from exc
        entry = _audit(
            action=Action.MARK_COMPENSATION_DONE, user=user, reason=why, run_id=step.run_id, step_id=step_id
        )
    return entry


# ---------------------------------------------------------------------------------------------
# Bulk: every step that failed for this reason in this window
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BulkItem:
    """One step the bulk resubmission found, and what it would do with it: `plan` is
    "resubmit_step" (a compensation step of a Failed run, or a forward step of a run that has
    undone nothing yet: in place), "resubmit_run" (a forward step whose
    run is Compensated: a new run) or "skip" (with `why`). `token` names the row and its
    updated_at as shown, for the confirmation (a row changed since is skipped as stale).
    `repeats`: the refusal code when the step was refused for a reason in the run's input (a
    declined card): resubmitted as is, it would be refused again (`scheduler.keys`,
    `step_refusal_repeats`); such rows are skipped unless the operator includes them. `key`:
    which idempotency key a resubmitted step would send, in words."""

    step_id: int
    run_id: str
    step_name: str
    kind: str
    run_state: str
    error: str
    failed_at: datetime | None
    plan: str
    why: str
    token: str
    repeats: str = ""
    key: str = ""


def steps_failed_matching_queryset(*, reason: str, since: datetime, until: datetime) -> QuerySet[Step]:
    """The bulk search: steps in Error whose last error contains `reason` (case-insensitive)
    that errored in [since, until), oldest first, at most BULK_LIMIT + 1. Index-backed: a range
    scan of step_error_finished_idx (finished_at WHERE Error) over the window, the text matched
    on those rows only - its cost is the window's errored steps, never the table
    (tests/supervisor/test_operator.py EXPLAINs it; bench/README.md, "Alerting", has the plan)."""
    return (
        Step.objects.select_related("run")
        .filter(
            process_state=Step.State.ERROR,
            last_error__icontains=reason,
            finished_at__gte=since,
            finished_at__lt=until,
        )
        .order_by("finished_at", "id")[: BULK_LIMIT + 1]
    )


def steps_failed_matching(*, reason: str, since: datetime, until: datetime) -> list[Step]:
    """`steps_failed_matching_queryset`'s rows (the caller says when there are more than
    BULK_LIMIT)."""
    return list(steps_failed_matching_queryset(reason=reason, since=since, until=until))


def _bulk_plan_of(step: Step, resubmitted: set[uuid.UUID]) -> tuple[str, str, str]:
    run = step.run
    if step.kind == Step.Kind.COMPENSATION:
        if run.state == Run.State.FAILED:
            return (
                "resubmit_step",
                "compensation in Error: back to Pending, run back to Compensating",
                (f"step:{step.pk}:{step.updated_at.isoformat()}"),
            )
        return "skip", f"run is {run.get_state_display()}", ""
    if run.pk in resubmitted:
        return "skip", "run already resubmitted", ""
    if run.state == Run.State.COMPENSATED:
        return (
            "resubmit_run",
            "run compensated: a new run of the same input",
            (f"run:{run.pk}:{run.updated_at.isoformat()}"),
        )
    if run.state == Run.State.COMPENSATING and forward_step_resubmittable(run=run):
        return (
            "resubmit_step",
            "nothing undone yet: back to Pending in place, run back to Running",
            (f"step:{step.pk}:{step.updated_at.isoformat()}"),
        )
    if run.state == Run.State.COMPENSATING:
        return "skip", "run still compensating: try again once it is compensated", ""
    return "skip", f"run is {run.get_state_display()}: resubmit its compensation first", ""


def _bulk_key_of(step: Step, plan: str) -> str:
    if plan == "resubmit_step":
        return step_key_choice(step).note
    if plan == "resubmit_run":
        return "a new run: new idempotency keys for every step"
    return ""


def bulk_resubmit_plan(
    *, reason: str, since: datetime, until: datetime, include_repeats: bool = False
) -> list[BulkItem]:
    """The dry run: what `bulk_resubmit` would do with every step that failed for `reason` in
    the window, and why. Changes nothing. At most one new run per run. A step refused for a
    reason in its run's input (a declined card, an item out of stock: `step_refusal_repeats`)
    would be refused again: it is marked, and skipped unless `include_repeats`."""
    if not reason.strip():
        raise OperatorRefused("reason", "give the error text to match (part of the steps' last error)")
    if until <= since:
        raise OperatorRefused("input", "the window's end must be after its start", {"until": ["after from"]})
    steps = steps_failed_matching(reason=reason.strip(), since=since, until=until)[:BULK_LIMIT]
    resubmitted = set(
        OperatorAction.objects.filter(
            run_id__in={s.run_id for s in steps}, action=Action.RESUBMIT_RUN
        ).values_list("run_id", flat=True)
    )
    items: list[BulkItem] = []
    planned_runs: set[uuid.UUID] = set()
    for step in steps:
        plan, why, token = _bulk_plan_of(step, resubmitted)
        repeats = step_refusal_repeats(step, workflow=step.run.workflow)
        if repeats and plan != "skip" and not include_repeats:
            plan, token = "skip", ""
            why = (
                f"would be refused again: refused for a reason in the input ({repeats}); include "
                "refusals that would be refused again to resubmit it anyway, or start a new run "
                "with an edited input from the run's page"
            )
        if plan == "resubmit_run":
            if step.run_id in planned_runs:
                plan, why, token = "skip", "another step of this run is resubmitted with it", ""
            planned_runs.add(step.run_id)
        items.append(
            BulkItem(
                step_id=step.pk,
                run_id=str(step.run_id),
                step_name=step.name,
                kind=step.kind,
                run_state=step.run.state,
                error=step.last_error[:300],
                failed_at=step.finished_at,
                plan=plan,
                why=why,
                token=token,
                repeats=repeats,
                key=_bulk_key_of(step, plan),
            )
        )
    return items


@dataclass(frozen=True)
class BulkOutcome:
    token: str
    done: bool
    message: str
    new_run_id: str = ""


def bulk_resubmit(
    *, tokens: Sequence[str], user: AbstractBaseUser, reason: str, match: str
) -> list[BulkOutcome]:
    """Do what the dry run showed: each token (`step:<id>:<updated_at>` or `run:<id>:<updated_at>`,
    from `bulk_resubmit_plan`) is resubmitted in its own transaction, refused if its row changed
    since the dry run (stale) or left its state; every outcome is reported. One audit entry per
    row acted on, and one for the whole (counts, the error text matched). At most BULK_LIMIT."""
    why = _reason(reason)
    if len(tokens) > BULK_LIMIT:
        raise OperatorRefused("input", f"at most {BULK_LIMIT} rows at once", {"tokens": ["too many"]})
    outcomes: list[BulkOutcome] = []
    for token in tokens:
        kind, _, rest = token.partition(":")
        ident, _, seen_text = rest.partition(":")
        try:
            seen = datetime.fromisoformat(seen_text)
            if kind == "step":
                step_resubmit(step_id=int(ident), user=user, reason=f"bulk: {why}", seen=seen)
                outcomes.append(BulkOutcome(token, True, "step resubmitted"))
            elif kind == "run":
                entry = run_resubmit(run_id=uuid.UUID(ident), user=user, reason=f"bulk: {why}", seen=seen)
                outcomes.append(BulkOutcome(token, True, "new run started", new_run_id=str(entry.new_run_id)))
            else:
                outcomes.append(BulkOutcome(token, False, "not a row of the dry run"))
        except (ValueError, TypeError):
            outcomes.append(BulkOutcome(token, False, "not a row of the dry run"))
        except OperatorRefused as exc:
            outcomes.append(BulkOutcome(token, False, str(exc)))
    done = sum(1 for o in outcomes if o.done)
    if outcomes:
        _audit(
            action=Action.BULK_RESUBMIT,
            user=user,
            reason=why,
            target=f"error contains {match!r}"[:200],
            detail={"rows": len(outcomes), "done": done, "refused": len(outcomes) - done},
        )
    return outcomes


def run_operator_actions(*, run_id: uuid.UUID | str) -> list[OperatorAction]:
    """The audit entries of a run, newest first: those on it and the one that started it (a
    resubmission of an older run)."""
    return list(
        OperatorAction.objects.filter(Q(run_id=run_id) | Q(new_run_id=run_id))
        .select_related("step")
        .order_by("-created_at", "-id")[:200]
    )

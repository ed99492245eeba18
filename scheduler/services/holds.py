"""Holds (issue 30, scheduler/holds.md): pauses of a whole owner or a whole workflow, and the
supervisor's reconciliation of pauses and concurrency keys. The engine knows no domain: a pause
names an owner (the tenant key) or a workflow name. The operator's audited actions on top of
these are `ops/pauses.py`; the customer's view of their pause is `pause_of_owner`."""

from __future__ import annotations

import logging

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction

from scheduler import transitions
from scheduler.models import Pause
from scheduler.workflows import WorkflowInputError, get_workflow

from .dispatch import scheduler_kick_enqueue

logger = logging.getLogger(__name__)


class PauseRefused(ValueError):
    """A pause or resume refused, nothing written. `errors` by field, like a form's."""

    def __init__(self, errors: dict[str, str]) -> None:
        self.errors = errors
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))


def pause_create(*, owner_id: int | None = None, workflow: str = "", reason: str, by: str) -> Pause:
    """Pause a whole owner (`owner_id`) or a whole workflow (`workflow`): from its commit no step
    of the scope is claimed (its Pending steps held now, later ones as they become Pending);
    steps already Processing finish; the supervisor leaves the scope's deadlines alone; the jobs
    dispatcher fires none of the scope's jobs' occurrences (their ScheduledJob rows held).

    Invariant: exactly one scope, a known owner or a registered workflow, a reason; one pause per
    scope (PauseRefused otherwise, nothing written). Transaction: its own, or the caller's (the
    operator's action and its audit entry commit with it)."""
    errors: dict[str, str] = {}
    if (owner_id is None) == (not workflow):
        errors["scope"] = "pause either a customer or a workflow"
    elif owner_id is not None and not get_user_model().objects.filter(pk=owner_id).exists():
        errors["owner"] = "no such customer"
    elif workflow:
        try:
            get_workflow(workflow)
        except WorkflowInputError:
            errors["workflow"] = "no such workflow"
    if not (reason or "").strip():
        errors["reason"] = "say why (the customer sees it)"
    if errors:
        raise PauseRefused(errors)
    scope = Pause.Scope.OWNER if owner_id is not None else Pause.Scope.WORKFLOW
    try:
        with transaction.atomic():
            pause = Pause.objects.create(
                scope=scope, owner_id=owner_id, workflow=workflow, reason=reason.strip(), paused_by=by
            )
            held = transitions.pauses_hold()
            occurrences = transitions.occurrences_hold()
    except IntegrityError as exc:
        raise PauseRefused({"scope": "already paused"}) from exc
    pause.refresh_from_db(fields=["created_at"])
    logger.warning(
        "paused %s by %s: %d pending step(s), %d job occurrence(s) held", pause, by, held, occurrences
    )
    return pause


def pause_resume(*, pause_id: int) -> transitions.Released:
    """End a pause: its scope's held steps are due at once (a kick after commit), the deadlines
    of its unfinished work shifted by the paused time; the jobs whose occurrences it held fire
    by their catch-up policy (each next row due at its occurrence's time: the dispatcher sees
    the ones missed while paused as a misfire). PauseRefused when it has ended already.
    Transaction: the caller's (or its own statement)."""
    released = transitions.pause_release(pause_id=pause_id)
    if released is None:
        raise PauseRefused({"pause": "not paused (resumed already?)"})
    transaction.on_commit(scheduler_kick_enqueue)
    return released


def holds_reconcile(*, batch: int) -> transitions.Reconciled:
    """The supervisor's tick: steps a pause missed held, keys' free slots given to their oldest
    waiters; a kick when some were admitted. Idempotent; two at once give the same result."""
    with transaction.atomic():
        done = transitions.holds_settle(batch=batch)
    if done.admitted:
        scheduler_kick_enqueue()
    return done


def pause_of_owner(*, owner_id: int) -> Pause | None:
    """What the customer sees: the pause of their whole account, or None."""
    return Pause.objects.filter(scope=Pause.Scope.OWNER, owner_id=owner_id).first()

"""Concurrency keys and pauses (issue 30, scheduler/holds.md) on the real PostgreSQL, the test
playing scheduler and agent. The same under real workers: tests/e2e/test_holds_live.py."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction

from scheduler.models import Pause, Run, Step
from scheduler.services import (
    PauseRefused,
    holds_reconcile,
    pause_create,
    pause_resume,
    run_cancel,
    run_submit,
    step_claim_due,
    step_reply,
)
from scheduler.workflows import ConcurrencyKey, StepDef, Workflow, WorkflowInputError, get_workflow, register
from supervisor.services import step_expire_sweep
from tests.engine_workflow import claim_one, expire, submit

pytestmark = pytest.mark.django_db

KEYED = "holds_keyed_test"


def _keyed_validate(data: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data.get("account"), str):
        raise WorkflowInputError({"account": "must be a string"})
    return {"account": data["account"], "limit": data.get("limit", 1)}


def _keyed() -> Workflow:
    try:
        return get_workflow(KEYED)
    except WorkflowInputError:
        return register(
            Workflow(
                name=KEYED,
                validate=_keyed_validate,
                concurrency=lambda data: ConcurrencyKey(key=data["account"], limit=data["limit"]),
                steps=[StepDef(name="only", operation="agents.enginetest.keyed", timeout=30)],
            )
        )


def _submit(user: Any, account: str, limit: int = 1) -> Run:
    _keyed()
    return run_submit(
        workflow=KEYED, input={"account": account, "limit": limit}, owner_id=user.id, kick=False
    )


def _first(run: Run) -> Step:
    return Step.objects.get(run=run, seq=0, kind="forward")


def _finish(run: Run) -> None:
    claim = claim_one(run)
    assert step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success", result={}) == "accepted"


def test_key__limit_1__second_run_waits_and_starts_when_the_first_ends(user):
    a, b, c = (_submit(user, "acct-1") for _ in range(3))

    assert [_first(r).process_state for r in (a, b, c)] == ["pending", "waiting", "waiting"]
    _finish(a)
    assert Run.objects.get(pk=a.pk).state == "completed"
    # FIFO: b (older) before c - admitted by a's end, and claimed in the same statement (the
    # reply's "one more step of the same operation").
    assert [_first(r).process_state for r in (b, c)] == ["processing", "waiting"]


def test_key__cancel_or_failure_frees_the_slot_too(user):
    a, b = _submit(user, "acct-c"), _submit(user, "acct-c")
    with transaction.atomic():
        run_cancel(run_id=a.id, actor="test")
    assert _first(b).process_state == "pending"


def test_key__limit_2_and_other_keys_and_owners_are_independent(user):
    other = get_user_model().objects.create_user(username="holds-other")
    runs = [_submit(user, "acct-2", limit=2) for _ in range(3)]
    mine_other_key = _submit(user, "acct-3")
    theirs_same_key = _submit(other, "acct-2", limit=2)

    assert [_first(r).process_state for r in runs] == ["pending", "pending", "waiting"]
    assert _first(mine_other_key).process_state == "pending"
    assert _first(theirs_same_key).process_state == "pending"


def test_key__a_waiter_whose_release_was_missed__reconcile_admits_it(user):
    a, b = _submit(user, "acct-r"), _submit(user, "acct-r")
    # A run ended by a statement that bypassed the trigger's release (as a rolled-back release would).
    with transaction.atomic():
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL session_replication_role = replica")  # no trigger fires
            Run.objects.filter(pk=a.pk).update(state="cancelled")
    assert _first(b).process_state == "waiting"
    assert holds_reconcile(batch=10).admitted == 1
    assert _first(b).process_state == "pending"


def test_key__bad_limit_from_input__refused_before_writing(user):
    with pytest.raises(WorkflowInputError):
        _submit(user, "acct-x", limit=0)
    assert not Run.objects.filter(workflow=KEYED).exists()


def test_pause_owner__pending_steps_held_new_ones_too_other_owner_unaffected(user):
    other = get_user_model().objects.create_user(username="holds-other-2")
    held = submit(user)
    pause = pause_create(owner_id=user.id, reason="invoice unpaid", by="admin:op")
    later = submit(user)
    free = submit(other)

    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=10)
    assert [c.run_id for c in claims] == [str(free.id)]
    assert Step.objects.get(run=held, seq=0).not_before.year == 9999 and _infinite(held)
    assert _infinite(later)

    released = pause_resume(pause_id=pause.id)
    assert released.released == 2
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=10)
    assert {c.run_id for c in claims} == {str(held.id), str(later.id)}


def _infinite(run: Run, seq: int = 0) -> bool:
    """Is the run's forward step `seq` held by a pause?"""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT not_before = sas_held() FROM scheduler_step"
            " WHERE run_id = %s AND seq = %s AND kind = 'forward'",
            [run.id, seq],
        )
        return bool(cursor.fetchone()[0])


def test_pause_owner__next_step_of_a_running_run_is_held_and_the_sweep_leaves_it(user):
    run = submit(user)
    claim = claim_one(run)
    pause_create(owner_id=user.id, reason="r", by="admin:op")
    # The step in flight finishes; its next step is held, not claimed.
    assert step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success", result={}) == "accepted"
    assert Step.objects.get(run=run, seq=1).process_state == "pending" and _infinite(run, 1)
    with transaction.atomic():
        assert step_claim_due(instance="test", limit=10) == []


def test_pause__processing_step_past_deadline__not_swept_while_paused_swept_after(user):
    run = submit(user)
    claim = claim_one(run)
    expire(claim.step_id)
    pause = pause_create(owner_id=user.id, reason="r", by="admin:op")

    assert step_expire_sweep(batch=10, instance="test").examined == 0
    assert Step.objects.get(pk=claim.step_id).process_state == "processing"
    pause_resume(pause_id=pause.id)
    assert step_expire_sweep(batch=10, instance="test").examined == 1


def test_pause_resume__deadlines_shifted_by_the_paused_time(user):
    run = submit(user)
    first = _first(run)
    Step.objects.filter(pk=first.pk).update(close_by=first.created_at + timedelta(minutes=5))
    pause = pause_create(owner_id=user.id, reason="r", by="admin:op")
    Pause.objects.filter(pk=pause.pk).update(created_at=pause.created_at - timedelta(minutes=3))

    released = pause_resume(pause_id=pause.id)

    assert released.paused_seconds >= 180
    step = Step.objects.get(pk=first.pk)
    assert step.close_by - (first.created_at + timedelta(minutes=5)) >= timedelta(minutes=3)


def test_pause_workflow__only_that_workflow_is_held(user):
    keyed = _submit(user, "acct-w")
    engine = submit(user)
    pause_create(workflow=KEYED, reason="vendor outage", by="admin:op")
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=10)
    assert [c.run_id for c in claims] == [str(engine.id)]
    assert _infinite(keyed)


def test_pause__bad_input__refused_nothing_written(user):
    for kwargs in (
        {"reason": "r"},
        {"owner_id": user.id, "workflow": "engine_test", "reason": "r"},
        {"owner_id": 10**9, "reason": "r"},
        {"workflow": "no-such", "reason": "r"},
        {"owner_id": user.id, "reason": "  "},
    ):
        with pytest.raises(PauseRefused):
            pause_create(by="admin:op", **kwargs)
    assert not Pause.objects.exists()
    pause_create(owner_id=user.id, reason="r", by="admin:op")
    with pytest.raises(PauseRefused, match="already paused"):
        pause_create(owner_id=user.id, reason="again", by="admin:op")
    with pytest.raises(PauseRefused):
        pause_resume(pause_id=10**9)

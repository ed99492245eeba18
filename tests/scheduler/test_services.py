"""Scheduler services on the real PostgreSQL (no workers: each test drives the services itself)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction

from scheduler.models import Run, Step, TaskExecutionHistory
from scheduler.services import (
    RunNotCancellable,
    run_cancel,
    run_submit,
    step_claim_due,
    step_reply,
)
from scheduler.workflows import StepDef, Workflow, WorkflowInputError, register
from supervisor.services import step_expire_sweep
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, claim_one, expire, submit

pytestmark = pytest.mark.django_db


def test_submit__writes_run_steps_and_received_event_in_one_go(user):
    run = submit(user)

    steps = list(run.steps.order_by("seq"))
    assert [s.process_state for s in steps] == ["pending", "waiting", "waiting"]
    assert [s.idempotency_key for s in steps] == [f"{run.id}:{s.name}" for s in steps]
    assert steps[0].payload == {"x": 1}
    # Built at submit, so a success reply makes the next step Pending in its one statement.
    assert steps[1].payload == {"x": 1, "after": f"{run.id}:a"}
    assert list(run.events.values_list("type", flat=True)) == ["received"]


def test_submit__unknown_workflow__refused():
    with pytest.raises(WorkflowInputError) as excinfo:
        run_submit(workflow="nope", input={}, kick=False)
    assert "workflow" in excinfo.value.errors
    assert Run.objects.count() == 0


def test_claim__sets_lease_deadline_from_db_clock_and_history(user):
    run = submit(user)

    claim = claim_one(run)

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "processing" and step.locked_by == "test"
    assert str(step.lease) == claim.lease
    # An agent must start it within the queue timeout; the attempt's outer bound adds its timeout.
    assert step.start_by - claim.claimed_at == step.queue_timeout
    assert step.complete_by - claim.claimed_at == step.queue_timeout + step.timeout
    assert TaskExecutionHistory.objects.get(step=step).status == "started"
    assert Run.objects.get(pk=run.id).state == "running"


def test_submit__claim_on_submit_with_room__first_step_claimed_in_the_submit_transaction(user, settings):
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": True, "MAX_IN_FLIGHT_PER_OPERATION": 50}

    run = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id)

    first = run.steps.get(seq=0)
    assert first.process_state == "processing" and first.lease is not None and first.attempts == 1
    assert TaskExecutionHistory.objects.filter(step=first, status="started").count() == 1
    assert Run.objects.get(pk=run.id).state == "running"


def test_submit__claim_on_submit_cap_reached__first_step_left_pending_for_the_scheduler(user, settings):
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": True, "MAX_IN_FLIGHT_PER_OPERATION": 1}
    busy = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id)
    assert busy.steps.get(seq=0).process_state == "processing"

    run = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id)

    first = run.steps.get(seq=0)
    assert first.process_state == "pending" and first.lease is None and first.attempts == 0
    assert Run.objects.get(pk=run.id).state == "pending"


def test_reply__follow_up_claims_another_runs_first_step__that_run_marked_running(user):
    first = submit(user)
    other = submit(user)
    claim = claim_one(first)

    # The reply claims the run's next step and one more step of its operation: the other
    # run's first step. That run must be Running, or it could never complete.
    assert step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success", result={}) == "accepted"

    assert other.steps.get(seq=0).process_state == "processing"
    assert Run.objects.get(pk=other.id).state == "running"
    assert list(other.events.values_list("type", flat=True)) == ["received", "started"]
    assert list(first.events.values_list("type", flat=True)) == ["received", "started", "step_completed"]


def test_claim__highest_priority_then_earliest_deadline_first(user):
    low = submit(user, priority=0)
    late = submit(user, priority=5, deadline=datetime(2030, 1, 2, tzinfo=UTC))
    early = submit(user, priority=5, deadline=datetime(2030, 1, 1, tzinfo=UTC))

    with transaction.atomic():
        order = [c.run_id for c in step_claim_due(instance="t", limit=3)]

    assert order == [str(early.id), str(late.id), str(low.id)]


def test_claim__backoff_not_before_in_future__not_claimed(user):
    run = submit(user)
    Step.objects.filter(run=run).update(not_before=datetime(2100, 1, 1, tzinfo=UTC))

    with transaction.atomic():
        assert step_claim_due(instance="t", limit=10) == []


def test_reply__success__next_step_pending_and_claimed(user):
    run = submit(user)
    claim = claim_one(run)

    assert (
        step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success", result={"ok": 1})
        == "accepted"
    )

    steps = {s.name: s for s in Step.objects.filter(run=run)}
    assert steps["a"].process_state == "processed" and steps["a"].result == {"ok": 1}
    # Claimed in the same transaction as the reply, for the next agent.
    assert steps["b"].process_state == "processing"
    assert steps["b"].payload == {"x": 1, "after": f"{run.id}:a"}


def test_reply__stale_lease__is_ignored(user):
    run = submit(user)
    first = claim_one(run)
    expire(first.step_id)
    step_expire_sweep(batch=10, instance="sup")
    Step.objects.filter(pk=first.step_id).update(not_before=datetime(2000, 1, 1, tzinfo=UTC))
    second = claim_one(run)
    before = Step.objects.values().get(pk=first.step_id)

    outcome = step_reply(step_id=first.step_id, lease=first.lease, outcome="success", result={"late": True})

    assert outcome == "ignored"
    assert Step.objects.values().get(pk=first.step_id) == before
    ignored = TaskExecutionHistory.objects.get(step_id=first.step_id, kind="late_reply")
    assert ignored.status == "ignored" and ignored.detail["reply_lease"] == first.lease
    assert ignored.detail["current_lease"] == second.lease


def test_reply__after_complete_by__is_ignored_even_with_current_lease(user):
    run = submit(user)
    claim = claim_one(run)
    expire(claim.step_id)

    assert step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success") == "ignored"
    assert Step.objects.get(pk=claim.step_id).process_state == "processing"


def test_reply__transient__failure_counted_and_backoff_applied(user):
    run = submit(user)
    claim = claim_one(run)

    step_reply(step_id=claim.step_id, lease=claim.lease, outcome="transient", error="503", claim_next=False)

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "pending" and step.failure_count == 1 and step.lease is None
    assert step.not_before > step.updated_at - timedelta(seconds=1)
    assert TaskExecutionHistory.objects.get(lease=claim.lease).status == "failed_transient"


def test_cancel__running_run__in_flight_step_fenced_and_compensated(user):
    run = submit(user)
    claim = claim_one(run)

    cancelled = run_cancel(run_id=run.id, actor="bob")

    assert cancelled.state == "compensating" and cancelled.cancel_requested
    assert step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success") == "ignored"
    comp = cancelled.steps.get(kind="compensation")
    # Its agent may still be calling: the undo waits for that attempt's complete_by.
    deadline = Step.objects.get(pk=claim.step_id).complete_by
    assert deadline is not None
    assert comp.not_before >= deadline


def test_cancel__pending_run_never_claimed__cancelled_at_once(user):
    run = submit(user)

    assert run_cancel(run_id=run.id, actor="bob").state == "cancelled"
    with pytest.raises(RunNotCancellable):
        run_cancel(run_id=run.id, actor="bob")


def test_workflow__adding_a_definition_needs_no_engine_change(user):
    register(
        Workflow(
            name="test_single_step",
            steps=[StepDef(name="only", operation="agents.enginetest.only", timeout=5, max_failures=2)],
        )
    )
    run = run_submit(workflow="test_single_step", input={"x": 1}, kick=False)
    claim = claim_one(run)
    step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success")
    assert Run.objects.get(pk=run.id).state == "completed"


def test_step_constraints__processing_without_lease__refused_by_database(user):
    from django.db import IntegrityError

    run = submit(user)
    with pytest.raises(IntegrityError), transaction.atomic():
        Step.objects.filter(run=run, seq=0).update(process_state="processing", lease=None, complete_by=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Step.objects.filter(run=run, seq=0).update(process_state="bogus")
    assert Step.objects.get(run=run, seq=0).process_state == "pending"

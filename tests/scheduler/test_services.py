"""Scheduler services on the real PostgreSQL (no workers: each test drives the services itself)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from orders.models import Order
from orders.services import order_submit
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.services import (
    RunNotCancellable,
    run_cancel,
    run_submit,
    step_claim_due,
    step_reply,
)
from scheduler.workflows import StepDef, Workflow, WorkflowInputError, register
from supervisor.services import step_expire_sweep

pytestmark = pytest.mark.django_db

ORDER_INPUT = {"items": [{"sku": "A", "quantity": 1}], "amount": "10.00", "currency": "EUR"}


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create(username="bob")


def submit(user, **kwargs):
    return run_submit(workflow="order_fulfilment", input=ORDER_INPUT, owner_id=user.id, kick=False, **kwargs)


def claim_one(run):
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=10, run_id=run.id)
    assert len(claims) == 1
    return claims[0]


def expire(step_id):
    Step.objects.filter(pk=step_id).update(complete_by=datetime(2000, 1, 1, tzinfo=UTC))


def test_submit__writes_run_steps_and_received_event_in_one_go(user):
    run = submit(user)

    steps = list(run.steps.order_by("seq"))
    assert [s.process_state for s in steps] == ["pending", "waiting", "waiting"]
    assert [s.idempotency_key for s in steps] == [f"{run.id}:{s.name}" for s in steps]
    assert steps[0].payload == {"items": [{"sku": "A", "quantity": 1}]}
    assert list(run.events.values_list("type", flat=True)) == ["received"]


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({**ORDER_INPUT, "items": []}, "items"),
        ({**ORDER_INPUT, "items": [{"sku": "A", "quantity": -1}]}, "items"),
        ({**ORDER_INPUT, "items": [{"sku": "A", "quantity": "2"}]}, "items"),
        ({**ORDER_INPUT, "amount": "-5"}, "amount"),
        ({**ORDER_INPUT, "amount": "1.234"}, "amount"),
        ({**ORDER_INPUT, "amount": True}, "amount"),
        ({**ORDER_INPUT, "currency": "XXX"}, "currency"),
        ({"items": ORDER_INPUT["items"], "currency": "EUR"}, "amount"),
        ({**ORDER_INPUT, "surprise": 1}, "non_field_errors"),
    ],
)
def test_order_submit__bad_input__refused_with_field_error_and_nothing_written(user, data, field):
    before = (Run.objects.count(), Step.objects.count(), Order.objects.count(), RunEvent.objects.count())

    with pytest.raises(WorkflowInputError) as excinfo:
        order_submit(owner_id=user.id, data=data)

    assert field in excinfo.value.errors
    assert excinfo.value.errors[field][0]
    after = (Run.objects.count(), Step.objects.count(), Order.objects.count(), RunEvent.objects.count())
    assert after == before


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
    assert step.complete_by - claim.claimed_at == step.timeout
    assert TaskExecutionHistory.objects.get(step=step).status == "started"
    assert Run.objects.get(pk=run.id).state == "running"


def test_submit__claim_on_submit_with_room__first_step_claimed_in_the_submit_transaction(user, settings):
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": True, "MAX_IN_FLIGHT_PER_OPERATION": 50}

    run = run_submit(workflow="order_fulfilment", input=ORDER_INPUT, owner_id=user.id)

    first = run.steps.get(seq=0)
    assert first.process_state == "processing" and first.lease is not None and first.attempts == 1
    assert TaskExecutionHistory.objects.filter(step=first, status="started").count() == 1
    assert Run.objects.get(pk=run.id).state == "running"


def test_submit__claim_on_submit_cap_reached__first_step_left_pending_for_the_scheduler(user, settings):
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": True, "MAX_IN_FLIGHT_PER_OPERATION": 1}
    busy = run_submit(workflow="order_fulfilment", input=ORDER_INPUT, owner_id=user.id)
    assert busy.steps.get(seq=0).process_state == "processing"

    run = run_submit(workflow="order_fulfilment", input=ORDER_INPUT, owner_id=user.id)

    first = run.steps.get(seq=0)
    assert first.process_state == "pending" and first.lease is None and first.attempts == 0
    assert Run.objects.get(pk=run.id).state == "pending"


def test_reply__follow_up_claims_another_runs_first_step__that_run_marked_running(user):
    first = submit(user)
    other = submit(user)
    claim = claim_one(first)

    # The reply claims the run's next step and one more step of its operation: the other
    # run's reserve_inventory. That run must be Running, or it could never complete.
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
    assert steps["reserve_inventory"].process_state == "processed"
    # Claimed in the same transaction as the reply, for the next agent.
    assert steps["charge_payment"].process_state == "processing"
    assert steps["charge_payment"].payload["amount"] == "10.00"


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


def test_sweep__expired_step_at_limit__error_alert_and_compensation(user):
    run = submit(user)
    Step.objects.filter(run=run, seq=0).update(max_failures=1)
    claim = claim_one(run)
    expire(claim.step_id)

    result = step_expire_sweep(batch=10, instance="sup")

    assert (result.examined, result.errored) == (1, 1)
    run.refresh_from_db()
    assert run.state == "compensating"
    comp = run.steps.get(kind="compensation")
    assert comp.name == "release_inventory" and comp.process_state == "pending"
    assert run.alerts.get().kind == "step_failed"


def test_sweep__mixed_batch__under_limit_retried_with_backoff_at_limit_errored(user):
    retry_run, limit_run = submit(user), submit(user)
    Step.objects.filter(run=retry_run, seq=0).update(backoff_base=2.0, backoff_max=60.0)
    Step.objects.filter(run=limit_run, seq=0).update(max_failures=1)
    retry_claim, limit_claim = claim_one(retry_run), claim_one(limit_run)
    expire(retry_claim.step_id)
    expire(limit_claim.step_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        before = cursor.fetchone()[0]

    result = step_expire_sweep(batch=10, instance="sup")

    assert (result.examined, result.retried, result.errored) == (2, 1, 1)
    step = Step.objects.get(pk=retry_claim.step_id)
    assert step.process_state == "pending" and step.failure_count == 1
    assert step.lease is None and step.locked_by is None and step.complete_by is None
    # Equal jitter on base 2 s, first failure: between 1 and 2 s from now.
    assert timedelta(seconds=0.99) <= step.not_before - before <= timedelta(seconds=2.5)
    assert step.last_error == "no reply before complete_by 2000-01-01T00:00:00.000000+00:00"
    history = {h.kind: h for h in TaskExecutionHistory.objects.filter(step=step)}
    assert history["attempt"].status == "timed_out" and history["attempt"].ended_at is not None
    decision = history["supervisor"]
    assert decision.status == "retry_scheduled" and decision.worker == "sup" and decision.retry_count == 1
    assert decision.detail["failed_lease"] == retry_claim.lease
    assert 1.0 <= decision.detail["backoff_seconds"] <= 2.0
    retrying = RunEvent.objects.get(run=retry_run, type="step_retrying")
    assert retrying.step_id == step.pk and retrying.data["failure_count"] == 1
    assert Step.objects.get(pk=limit_claim.step_id).process_state == "error"
    assert Run.objects.get(pk=limit_run.id).state == "compensating"
    # The retried step is claimable again once its backoff has passed, under a new lease.
    Step.objects.filter(pk=step.pk).update(not_before=datetime(2000, 1, 1, tzinfo=UTC))
    again = claim_one(retry_run)
    assert again.step_id == step.pk and again.lease != retry_claim.lease and again.attempt == 2


def test_sweep__nothing_expired__changes_nothing(user):
    run = submit(user)
    claim_one(run)

    result = step_expire_sweep(batch=10, instance="sup")

    assert result.examined == 0
    assert Step.objects.get(run=run, seq=0).process_state == "processing"


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
            steps=[StepDef(name="only", operation="agents.shipping.create", timeout=5, max_failures=2)],
        )
    )
    run = run_submit(workflow="test_single_step", input={"x": 1}, kick=False)
    claim = claim_one(run)
    step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success")
    assert Run.objects.get(pk=run.id).state == "completed"


@pytest.mark.parametrize(
    ("query", "index"),
    [
        (
            "SELECT id FROM scheduler_step WHERE process_state = 'pending' AND not_before <= now() "
            "ORDER BY priority DESC, deadline ASC NULLS LAST, not_before ASC LIMIT 10",
            "step_pending_claim_idx",
        ),
        (
            "SELECT id FROM scheduler_step WHERE process_state = 'processing' AND complete_by < now() "
            "ORDER BY complete_by LIMIT 10",
            "step_processing_deadline_idx",
        ),
    ],
)
def test_hot_queries__use_their_partial_index(user, query, index):
    for _ in range(3):
        submit(user)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + query)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert index in plan, plan


def test_step_constraints__processing_without_lease__refused_by_database(user):
    from django.db import IntegrityError

    run = submit(user)
    with pytest.raises(IntegrityError), transaction.atomic():
        Step.objects.filter(run=run, seq=0).update(process_state="processing", lease=None, complete_by=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        Step.objects.filter(run=run, seq=0).update(process_state="bogus")
    assert Step.objects.get(run=run, seq=0).process_state == "pending"

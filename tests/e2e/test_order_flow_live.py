"""The order workflow end to end on real worker processes, beat, PostgreSQL, Redis and the simulator."""

from __future__ import annotations

import pytest

from scheduler.models import Run, Step, TaskExecutionHistory

from .helpers import step, submit_order, wait_run, wait_step_state


@pytest.mark.both_brokers
def test_order__healthy_services__completes_with_one_effect_each(engine, demo_user):
    order = submit_order(demo_user)

    run = wait_run(order.run_id, (Run.State.COMPLETED,))

    steps = list(run.steps.order_by("seq"))
    assert [s.name for s in steps] == ["reserve_inventory", "charge_payment", "create_shipment"]
    assert all(s.process_state == Step.State.PROCESSED and s.attempts == 1 for s in steps)
    assert steps[1].result["status"] == "charged"
    for service, operation in (("inventory", "reserve"), ("payment", "charge"), ("shipping", "create")):
        assert len(engine.sim.ledger(service=service, operation=operation)) == 1
    assert [e.type for e in run.events.all()] == [
        "received",
        "started",
        "step_completed",
        "step_completed",
        "step_completed",
        "completed",
    ]
    attempts = TaskExecutionHistory.objects.filter(run=run, kind="attempt")
    assert sorted(attempts.values_list("status", flat=True)) == ["succeeded"] * 3


def test_order__transient_faults__retried_inside_deadline(engine, demo_user):
    engine.sim.set_faults("payment", transient_rate=0.5, seed=7)

    order = submit_order(demo_user)
    run = wait_run(order.run_id, (Run.State.COMPLETED,))

    charge_stats = engine.sim.stats()["services"]["payment"]["charge"]
    assert charge_stats.get("fault_transient", 0) >= 1, charge_stats
    assert len(engine.sim.ledger(service="payment", operation="charge")) == 1
    assert step(run.id, "charge_payment").process_state == Step.State.PROCESSED


def test_order__step_overruns_deadline__supervisor_retries_and_it_completes(engine, demo_user):
    engine.sim.set_faults("shipping", hang=True)
    order = submit_order(demo_user)
    wait_step_state(order.run_id, "create_shipment", Step.State.PROCESSING)
    # The agent gives up at complete_by without replying; the supervisor must notice.
    first = wait_for_failure_count(order.run_id, "create_shipment", 1)
    engine.sim.set_faults("shipping", hang=False)

    run = wait_run(order.run_id, (Run.State.COMPLETED,))

    shipping = step(run.id, "create_shipment")
    assert first.failure_count == 1
    assert shipping.failure_count == 1 and shipping.attempts == 2
    history = TaskExecutionHistory.objects.filter(step=shipping).order_by("id")
    assert [h.status for h in history if h.kind == "attempt"] == ["timed_out", "succeeded"]
    assert [h.status for h in history if h.kind == "supervisor"] == ["retry_scheduled"]
    assert len(engine.sim.ledger(service="shipping", operation="create")) <= 1


def test_order__permanent_fault__compensated_in_reverse_order(engine, demo_user):
    engine.sim.set_faults("shipping", permanent_rate=1.0)

    order = submit_order(demo_user)
    run = wait_run(order.run_id, (Run.State.COMPENSATED,))

    comps = list(run.steps.filter(kind=Step.Kind.COMPENSATION).order_by("seq"))
    assert [c.name for c in comps] == ["refund_payment", "release_inventory"]
    assert all(c.process_state == Step.State.PROCESSED for c in comps)
    assert step(run.id, "create_shipment").process_state == Step.State.ERROR
    assert step(run.id, "charge_payment").process_state == Step.State.COMPENSATED
    assert step(run.id, "reserve_inventory").process_state == Step.State.COMPENSATED
    ledger = engine.sim.ledger()
    undo = [(e["service"], e["operation"]) for e in ledger if e["operation"] in ("refund", "release")]
    assert undo == [("payment", "refund"), ("inventory", "release")]
    # A permanent refusal is a business outcome: compensated, no operator alert (issue 7).
    assert not run.alerts.exists()
    assert [e.type for e in run.events.all()][-3:] == ["step_completed", "step_completed", "compensated"]


def test_order__declined_card__nothing_charged_inventory_released(engine, demo_user):
    order = submit_order(demo_user, card="tok_decline")

    run = wait_run(order.run_id, (Run.State.COMPENSATED,))

    assert [c.name for c in run.steps.filter(kind="compensation")] == ["release_inventory"]
    assert engine.sim.ledger(service="payment") == []


def test_submit__kick_lost__periodic_tick_claims_it(engine, demo_user):
    from scheduler.services import run_submit

    run = run_submit(
        workflow="order_fulfilment",
        input={"items": [{"sku": "X", "quantity": 1}], "amount": "1.00", "currency": "USD"},
        owner_id=demo_user.id,
        kick=False,  # as if the kick message were lost
    )

    done = wait_run(run.id, (Run.State.COMPLETED,), timeout=30)

    assert done.state == Run.State.COMPLETED


def wait_for_failure_count(run_id, name, count, timeout=20.0):
    from sastools.harness import wait_for

    return wait_for(
        lambda: Step.objects.filter(run_id=run_id, name=name, failure_count__gte=count).first(),
        timeout=timeout,
        what=f"{name} failure_count >= {count}",
    )

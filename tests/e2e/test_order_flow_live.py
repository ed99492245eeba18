"""The order workflow end to end on real worker processes, beat, PostgreSQL, Redis and the simulator.

Its logic (a deadline overrun, a permanent fault, a declined card) is tested on the harness in
tests/orders/test_order_flow.py (issue 31); what stays here needs real processes."""

from __future__ import annotations

import pytest

from scheduler.models import Run, Step, TaskExecutionHistory

from .helpers import step, submit_order, wait_run


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

"""The order workflow's logic on the harness (sastools.testkit): the real state machine and
database, the agents' bodies in-process, fake inventory, payment and shipping services and a
virtual clock - no broker, no worker, no waiting. Moved here from tests/e2e/test_order_flow_live.py
(issue 31), which keeps what needs real processes: the healthy order on both brokers, the
simulator's transient faults and a lost kick picked up by beat's tick."""

from __future__ import annotations

from typing import Any

import pytest

from orders.services import order_submit
from sastools.testkit import Harness, answer, refuse, time_out
from scheduler.models import Run, Step, TaskExecutionHistory
from tests.e2e.helpers import ORDER


@pytest.fixture
def shop(harness: Harness) -> Harness:
    harness.remote("inventory", default=answer({"status": "reserved"}))
    harness.remote("payment", default=answer({"status": "charged"}))
    harness.remote("shipping", default=answer({"status": "created"}))
    return harness


def _submit(user: Any, **overrides: Any) -> Run:
    order = order_submit(owner_id=user.id, data={**ORDER, **overrides})
    return Run.objects.get(pk=order.run_id)


def _step(run: Run, name: str) -> Step:
    return Step.objects.get(run_id=run.pk, name=name)


def test_order__step_overruns_deadline__supervisor_retries_and_it_completes(
    shop: Harness, django_user_model: Any
) -> None:
    shop.remote("shipping").script("/shipping/create", time_out())
    run = _submit(django_user_model.objects.create(username="order-flow-overrun"))

    shop.settle()

    assert shop.run(run).state == Run.State.COMPLETED
    shipping = _step(run, "create_shipment")
    assert shipping.failure_count == 1 and shipping.attempts == 2
    history = TaskExecutionHistory.objects.filter(step=shipping).order_by("id")
    assert [h.status for h in history if h.kind == "attempt"] == ["timed_out", "succeeded"]
    assert [h.status for h in history if h.kind == "supervisor"] == ["retry_scheduled"]
    calls = shop.remotes.called("shipping", "/shipping/create")
    assert len(calls) == 2 and calls[0].idempotency_key == calls[1].idempotency_key


def test_order__permanent_fault__compensated_in_reverse_order(shop: Harness, django_user_model: Any) -> None:
    shop.remote("shipping", default=refuse(422, "address_unknown"))
    run = _submit(django_user_model.objects.create(username="order-flow-permanent"))

    shop.settle()

    run = shop.run(run)
    assert run.state == Run.State.COMPENSATED
    comps = list(run.steps.filter(kind=Step.Kind.COMPENSATION).order_by("seq"))
    assert [c.name for c in comps] == ["refund_payment", "release_inventory"]
    assert all(c.process_state == Step.State.PROCESSED for c in comps)
    assert _step(run, "create_shipment").process_state == Step.State.ERROR
    assert _step(run, "charge_payment").process_state == Step.State.COMPENSATED
    assert _step(run, "reserve_inventory").process_state == Step.State.COMPENSATED
    undo = [(c.service, c.path) for c in shop.remotes.calls if c.path.endswith(("refund", "release"))]
    assert undo == [("payment", "/payment/refund"), ("inventory", "/inventory/release")]
    # A permanent refusal is a business outcome: compensated, no operator alert (issue 7).
    assert not run.alerts.exists()
    assert [e.type for e in run.events.all()][-3:] == ["step_completed", "step_completed", "compensated"]


def test_order__declined_card__nothing_charged_inventory_released(
    shop: Harness, django_user_model: Any
) -> None:
    shop.remote("payment").script("/payment/charge", refuse(402, "card_declined"))
    run = _submit(django_user_model.objects.create(username="order-flow-declined"), card="tok_decline")

    shop.settle()

    run = shop.run(run)
    assert run.state == Run.State.COMPENSATED
    assert [c.name for c in run.steps.filter(kind="compensation")] == ["release_inventory"]
    assert [c.path for c in shop.remotes.called("payment")] == ["/payment/charge"]  # refused: nothing charged

"""Realistic admin data, made only through the engine's services (no hand-written state rows).

Agents are played by the test: claim a step as a scheduler would, then reply as its agent would.
Replies use `claim_next=False` so nothing is dispatched to a broker.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from orders.models import Order
from orders.services import order_submit
from scheduler.models import Run
from scheduler.services import Claim, step_claim_due, step_reply

WORKER = "admin-tests:1"
OUTAGE = "payment unreachable: connection refused (payment service unavailable)"
ORDER = {"items": [{"sku": "SKU-1", "quantity": 2}], "amount": "25.00", "currency": "EUR"}


def claim(run_id: Any) -> Claim:
    with transaction.atomic():
        claims = step_claim_due(instance=WORKER, limit=1, run_id=run_id)
    assert claims, f"nothing to claim for run {run_id}"
    return claims[0]


def reply(c: Claim, outcome: str, error: str = "") -> None:
    result = {"ok": True} if outcome == "success" else None
    answer = step_reply(
        step_id=c.step_id,
        lease=c.lease,
        outcome=outcome,  # type: ignore[arg-type]
        result=result,
        error=error,
        worker=WORKER,
        claim_next=False,
    )
    assert answer == "accepted"


def order_pending(user: Any, **data: Any) -> Order:
    return order_submit(owner_id=user.id, data={**ORDER, **data})


def order_running(user: Any) -> Order:
    """reserve_inventory Processed, charge_payment Processing."""
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    claim(order.run_id)
    return order


def order_completed(user: Any) -> Order:
    order = order_pending(user)
    for _ in range(3):
        reply(claim(order.run_id), "success")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPLETED
    return order


def order_failed(user: Any) -> Order:
    """The card is declined (permanent, no alert): the run compensates; the release of the
    inventory is refused too, so the run ends Failed with a critical alert - it needs an operator."""
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "permanent", error="card declined")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPENSATING
    reply(claim(order.run_id), "permanent", error="reservation unknown to inventory")
    assert Run.objects.get(pk=order.run_id).state == Run.State.FAILED
    return order


def order_failed_refund(user: Any) -> Order:
    """Reserved and charged; the shipment refused for good, so the run compensates; the refund is
    refused too (a 402): the run ends Failed with the refund in Error and the release waiting -
    the page with the most buttons an operator meets (issue 28)."""
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "permanent", error="address rejected by the carrier")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPENSATING
    reply(claim(order.run_id), "permanent", error="payment answered 402: refund refused")
    assert Run.objects.get(pk=order.run_id).state == Run.State.FAILED
    return order


def order_compensated(user: Any, error: str = OUTAGE) -> Order:
    """reserve done, charge refused (its last error `error`), release done: Compensated."""
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "permanent", error=error)
    reply(claim(order.run_id), "success")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPENSATED
    return order

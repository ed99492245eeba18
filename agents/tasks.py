"""Agent tasks: one per remote operation, on one queue per remote service (see CELERY_TASK_ROUTES).

Each is a thin binding of (service, path) to `AgentTask.perform`; arguments are JSON only.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from .base import AgentTask


class InventoryAgent(AgentTask):
    service = "inventory"


class PaymentAgent(AgentTask):
    service = "payment"


class ShippingAgent(AgentTask):
    service = "shipping"


def _run(task: AgentTask, path: str, kwargs: dict[str, Any]) -> str:
    return task.perform(path=path, **kwargs)


@shared_task(name="agents.inventory.reserve", bind=True, base=InventoryAgent)
def inventory_reserve(self: AgentTask, **kwargs: Any) -> str:
    return _run(self, "/inventory/reserve", kwargs)


@shared_task(name="agents.inventory.release", bind=True, base=InventoryAgent)
def inventory_release(self: AgentTask, **kwargs: Any) -> str:
    return _run(self, "/inventory/release", kwargs)


@shared_task(name="agents.payment.charge", bind=True, base=PaymentAgent)
def payment_charge(self: AgentTask, **kwargs: Any) -> str:
    return _run(self, "/payment/charge", kwargs)


@shared_task(name="agents.payment.refund", bind=True, base=PaymentAgent)
def payment_refund(self: AgentTask, **kwargs: Any) -> str:
    return _run(self, "/payment/refund", kwargs)


@shared_task(name="agents.shipping.create", bind=True, base=ShippingAgent)
def shipping_create(self: AgentTask, **kwargs: Any) -> str:
    return _run(self, "/shipping/create", kwargs)


@shared_task(name="agents.shipping.cancel", bind=True, base=ShippingAgent)
def shipping_cancel(self: AgentTask, **kwargs: Any) -> str:
    return _run(self, "/shipping/cancel", kwargs)

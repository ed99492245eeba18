"""The order domain's agent operations: one remote call each, on its service's queue.

The engine and the agent base know no domain; a new operation is one `remote_operation` line
here and the workflow step that names it (orders/workflows.py).
"""

from __future__ import annotations

from agents.operations import remote_operation

inventory_reserve = remote_operation(
    name="agents.inventory.reserve", service="inventory", path="/inventory/reserve"
)
inventory_release = remote_operation(
    name="agents.inventory.release", service="inventory", path="/inventory/release"
)
payment_charge = remote_operation(name="agents.payment.charge", service="payment", path="/payment/charge")
payment_refund = remote_operation(name="agents.payment.refund", service="payment", path="/payment/refund")
shipping_create = remote_operation(name="agents.shipping.create", service="shipping", path="/shipping/create")
shipping_cancel = remote_operation(name="agents.shipping.cancel", service="shipping", path="/shipping/cancel")

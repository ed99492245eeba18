from __future__ import annotations

from typing import Any

from orders.models import Order
from orders.services import order_submit
from scheduler.models import Run, Step

from ..harness import wait_for

ORDER = {"items": [{"sku": "SKU-1", "quantity": 2}], "amount": "25.00", "currency": "EUR"}


def submit_order(user: Any, **overrides: Any) -> Order:
    return order_submit(owner_id=user.id, data={**ORDER, **overrides})


def wait_run(run_id: Any, states: tuple[str, ...], timeout: float = 30.0) -> Run:
    def check() -> Run | None:
        run = Run.objects.get(pk=run_id)
        return run if run.state in states else None

    return wait_for(check, timeout=timeout, what=f"run {run_id} to reach {states}")


def step(run_id: Any, name: str) -> Step:
    return Step.objects.get(run_id=run_id, name=name)


def wait_step_state(run_id: Any, name: str, state: str, timeout: float = 20.0) -> Step:
    return wait_for(
        lambda: Step.objects.filter(run_id=run_id, name=name, process_state=state).first(),
        timeout=timeout,
        what=f"step {name} of {run_id} to be {state}",
    )

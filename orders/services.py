"""Order services: submitting an order writes the order, its run and the run's steps together."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from scheduler.ids import uuid7
from scheduler.limits import quota_check_runs
from scheduler.models import Run
from scheduler.services import run_cancel, run_submit, run_validate_input
from scheduler.workflows import WorkflowInputError
from webhooks.services import webhook_subscribe

from .models import Order
from .workflows import ORDER_WORKFLOW


class IdempotencyKeyReused(Exception):
    """The Idempotency-Key was already used by this user for a different request."""

    def __init__(self, order: Order) -> None:
        self.order = order
        super().__init__(f"idempotency key already used for order {order.pk} with a different request")


def _fingerprint(cleaned: Mapping[str, Any], callback_url: str) -> str:
    """What makes two requests "the same order": the cleaned fields (so 25 and "25.00" match)."""
    canonical = {k: v for k, v in cleaned.items() if k != "order_id"}
    canonical["callback_url"] = callback_url
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def order_submit(
    *,
    owner_id: int,
    data: Mapping[str, Any],
    priority: int = 0,
    callback_url: str = "",
    idempotency_key: str | None = None,
) -> Order:
    """Validate `data` (items, amount, currency, card) and create the order and its run.

    Invariant: bad input raises WorkflowInputError (field -> messages) and writes nothing; an
    owner with SAS_QUOTAS["RUNS_IN_FLIGHT"] runs going gets QuotaExceeded (nothing written).
    Transaction: the order, the run, its steps, the "received" event and (with `callback_url`)
    the webhook subscription commit together; the scheduler is kicked after commit. With
    `idempotency_key`, a second order with the same (owner, key) raises IntegrityError (and its
    rows roll back): `order_submit_idempotent` turns that into "return the first one".
    """
    order_id = uuid7()
    _, cleaned = run_validate_input(workflow=ORDER_WORKFLOW, input={**data, "order_id": str(order_id)})
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
        raise WorkflowInputError({"idempotency_key": "must be 1 to 255 characters"})
    with transaction.atomic():
        # Counted under the owner's quota lock, held until this transaction commits.
        quota_check_runs(owner_id=owner_id)
        run = run_submit(
            workflow=ORDER_WORKFLOW,
            input=cleaned,
            owner_id=owner_id,
            priority=priority,
            correlation_id=str(order_id),
            observed=bool(callback_url),
        )
        order = Order.objects.create(
            id=order_id,
            owner_id=owner_id,
            run=run,
            items=cleaned["items"],
            amount=cleaned["amount"],
            currency=cleaned["currency"],
            card_token=cleaned["card"],
            callback_url=callback_url,
            idempotency_key=idempotency_key or "",
            request_fingerprint=_fingerprint(cleaned, callback_url) if idempotency_key is not None else "",
        )
        if callback_url:
            webhook_subscribe(
                run_id=run.id, owner_id=owner_id, url=callback_url, correlation_id=str(order_id)
            )
    return order


@dataclass(frozen=True)
class SubmitResult:
    order: Order
    created: bool


def order_submit_idempotent(
    *, owner_id: int, data: Mapping[str, Any], idempotency_key: str, callback_url: str = ""
) -> SubmitResult:
    """`order_submit`, at most once per (owner, idempotency_key).

    A retry with the same key and the same request returns the first order (created=False); the
    same key with a different request raises IdempotencyKeyReused. Two identical requests that
    race both try to insert; the unique constraint lets one win and the other, after its rows
    roll back, returns the winner. Transaction: order_submit's, in a savepoint.
    """
    _, cleaned = run_validate_input(workflow=ORDER_WORKFLOW, input=data)
    fingerprint = _fingerprint(cleaned, callback_url)
    existing = _order_by_key(owner_id=owner_id, idempotency_key=idempotency_key)
    if existing is None:
        try:
            order = order_submit(
                owner_id=owner_id, data=data, callback_url=callback_url, idempotency_key=idempotency_key
            )
            return SubmitResult(order=order, created=True)
        except IntegrityError:
            # Lost the race: the other request's order committed first.
            existing = _order_by_key(owner_id=owner_id, idempotency_key=idempotency_key)
            if existing is None:
                raise
    if existing.request_fingerprint != fingerprint:
        raise IdempotencyKeyReused(existing)
    return SubmitResult(order=existing, created=False)


def _order_by_key(*, owner_id: int, idempotency_key: str) -> Order | None:
    return (
        Order.objects.select_related("run").filter(owner_id=owner_id, idempotency_key=idempotency_key).first()
    )


def order_cancel(*, order: Order, actor: str) -> Run:
    """Cancel the order's run if it has not finished; completed steps are compensated.
    Raises scheduler.services.RunNotCancellable otherwise."""
    return run_cancel(run_id=order.run_id, actor=actor)

"""The business operations of the three simulated services and their idempotency rules.

The order of checks for a business call that got past the network-level faults (down, hang,
latency, transient) is, under the per-key lock(s):

1. the key was first used for another operation            -> 422 idempotency_key_reused
2. forward call whose key has been compensated (tombstone) -> 409 voided (no effect)
3. the key already has a stored response                   -> replay it (same status and body)
4. ``permanent_rate`` fault fires                          -> 422 rejected / 402 card_declined (stored)
5. the operation itself runs; its response is stored under the key.

A compensation locks both its own key and the forward key it targets, so a forward call and its
compensation can never interleave: either the forward effect happens first and is undone, or the
tombstone is written first and the forward call is refused.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import re
import uuid
from collections.abc import Callable
from typing import Any, Literal

from simulator.faults import FaultBoard, ServiceFaults
from simulator.state import Effect, SimulatorState, StoredResponse

MAX_KEY_LENGTH = 255

_CURRENCY = re.compile(r"^[A-Z]{3}$")


class BadRequest(ValueError):
    """The request body is not what the operation expects; nothing happens."""


@dataclasses.dataclass(frozen=True)
class Result:
    status: int
    body: dict[str, Any]
    #: Label counted in ``/_stats`` (applied, noop, replayed, refused, voided, ...).
    outcome: str


Kind = Literal["forward", "compensation"]
Validator = Callable[[dict[str, Any]], None]


@dataclasses.dataclass(frozen=True)
class Operation:
    service: str
    name: str
    kind: Kind
    validate: Validator
    #: Prefix of the ids this operation creates (``res_``, ``ch_`` ...).
    id_prefix: str
    #: For a compensation: the body field that names the forward key it undoes.
    target_field: str = ""
    #: ``status`` of the 200 body when the effect happened (``charged``, ``refunded`` ...).
    done_status: str = ""
    #: For a compensation: ``status`` of the 200 body when there was nothing to undo.
    noop_status: str = ""
    #: Name of the id field in the 200 body, if any (``charge_id``, ``refund_id`` ...).
    done_id_field: str = ""

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.name}"


# -- validation ------------------------------------------------------------------------------------


def _require_str(body: dict[str, Any], field: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value.strip():
        raise BadRequest(f"'{field}' must be a non-empty string")
    return value


def _validate_items(body: dict[str, Any], *, check_stock_fields: bool) -> None:
    items = body.get("items")
    if not isinstance(items, list) or not items:
        raise BadRequest("'items' must be a non-empty list")
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadRequest(f"items[{index}] must be an object")
        if not check_stock_fields:
            continue
        sku = item.get("sku")
        if not isinstance(sku, str) or not sku.strip():
            raise BadRequest(f"items[{index}].sku must be a non-empty string")
        quantity = item.get("quantity")
        if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
            raise BadRequest(f"items[{index}].quantity must be a positive integer")


def _validate_reserve(body: dict[str, Any]) -> None:
    _validate_items(body, check_stock_fields=True)


def _validate_charge(body: dict[str, Any]) -> None:
    amount = body.get("amount")
    if not isinstance(amount, str):
        raise BadRequest("'amount' must be a decimal string such as \"12.50\"")
    try:
        value = decimal.Decimal(amount)
    except decimal.InvalidOperation:
        raise BadRequest("'amount' must be a decimal string such as \"12.50\"") from None
    if not value.is_finite() or value <= 0:
        raise BadRequest("'amount' must be a positive decimal")
    currency = body.get("currency")
    if not isinstance(currency, str) or not _CURRENCY.match(currency):
        raise BadRequest("'currency' must be a 3-letter upper-case ISO 4217 code")
    _require_str(body, "card")


def _validate_shipping_create(body: dict[str, Any]) -> None:
    order_id = body.get("order_id")
    valid_int = isinstance(order_id, int) and not isinstance(order_id, bool)
    if not valid_int and (not isinstance(order_id, str) or not order_id.strip()):
        raise BadRequest("'order_id' must be a non-empty string or an integer")
    _validate_items(body, check_stock_fields=False)


def _target_validator(field: str) -> Validator:
    def validate(body: dict[str, Any]) -> None:
        value = _require_str(body, field)
        if len(value) > MAX_KEY_LENGTH:
            raise BadRequest(f"'{field}' is longer than {MAX_KEY_LENGTH} characters")

    return validate


OPERATIONS: tuple[Operation, ...] = (
    Operation(
        "inventory",
        "reserve",
        "forward",
        _validate_reserve,
        "res_",
        done_status="reserved",
        done_id_field="reservation_id",
    ),
    Operation(
        "inventory",
        "release",
        "compensation",
        _target_validator("reservation_key"),
        "rel_",
        target_field="reservation_key",
        done_status="released",
        noop_status="nothing_to_release",
    ),
    Operation(
        "payment",
        "charge",
        "forward",
        _validate_charge,
        "ch_",
        done_status="charged",
        done_id_field="charge_id",
    ),
    Operation(
        "payment",
        "refund",
        "compensation",
        _target_validator("charge_key"),
        "re_",
        target_field="charge_key",
        done_status="refunded",
        noop_status="nothing_to_refund",
        done_id_field="refund_id",
    ),
    Operation(
        "shipping",
        "create",
        "forward",
        _validate_shipping_create,
        "shp_",
        done_status="created",
        done_id_field="shipment_id",
    ),
    Operation(
        "shipping",
        "cancel",
        "compensation",
        _target_validator("shipment_key"),
        "cnl_",
        target_field="shipment_key",
        done_status="cancelled",
        noop_status="nothing_to_cancel",
    ),
)

ROUTES: dict[str, Operation] = {op.path: op for op in OPERATIONS}


def parse_body(raw: bytes, operation: Operation) -> dict[str, Any]:
    """Decode and validate a business request body; raise `BadRequest` if it is unusable."""

    def reject_constant(name: str) -> Any:
        raise BadRequest(f"invalid JSON constant {name}")

    try:
        body = json.loads(raw or b"null", parse_constant=reject_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, BadRequest):
            raise
        raise BadRequest(f"malformed JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    operation.validate(body)
    return body


def bad_request(detail: str) -> Result:
    return Result(400, {"error": "bad_request", "detail": detail}, "bad_request")


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:20]


# -- execution -------------------------------------------------------------------------------------


class Services:
    """Runs business operations against a `SimulatorState` with the faults of a `FaultBoard`."""

    def __init__(self, state: SimulatorState, faults: FaultBoard) -> None:
        self.state = state
        self.faults = faults

    def execute(self, operation: Operation, key: str, body: dict[str, Any], faults: ServiceFaults) -> Result:
        """Run ``operation`` once per ``key``; ``body`` has been validated by `parse_body`."""
        lock_keys = [key]
        target = ""
        if operation.kind == "compensation":
            target = body[operation.target_field]
            lock_keys.append(target)
        with self.state.key_locks.hold(*lock_keys), self.state.atomic():
            return self._execute_locked(operation, key, body, faults, target)

    def _execute_locked(
        self, operation: Operation, key: str, body: dict[str, Any], faults: ServiceFaults, target: str
    ) -> Result:
        state = self.state
        stored = state.stored_response(key)
        if stored is not None and (stored.service, stored.operation) != (operation.service, operation.name):
            return Result(422, {"error": "idempotency_key_reused"}, "key_reused")
        if operation.kind == "forward" and state.is_voided(operation.service, key):
            return Result(409, {"error": "voided"}, "voided")
        if stored is not None:
            return Result(stored.status, stored.body, "replayed")

        if self.faults.roll(operation.service, faults.permanent_rate):
            if operation.service == "payment":
                result = Result(402, {"error": "card_declined"}, "fault_permanent")
            else:
                result = Result(422, {"error": "rejected"}, "fault_permanent")
        elif operation.kind == "forward":
            result = self._forward(operation, key, body)
        else:
            result = self._compensate(operation, key, body, target)
        state.store_response(
            key, StoredResponse(operation.service, operation.name, result.status, result.body)
        )
        return result

    def _forward(self, operation: Operation, key: str, body: dict[str, Any]) -> Result:
        if operation.name == "reserve" and any(item.get("sku") == "OUT-OF-STOCK" for item in body["items"]):
            return Result(409, {"error": "out_of_stock"}, "refused")
        if operation.name == "charge" and body["card"] == "tok_decline":
            return Result(402, {"error": "card_declined"}, "refused")

        effect_id = _new_id(operation.id_prefix)
        self.state.add_effect(operation.service, key, Effect(effect_id))
        self.state.append_ledger(operation.service, operation.name, key, effect_id, body)
        return Result(200, {operation.done_id_field: effect_id, "status": operation.done_status}, "applied")

    def _compensate(self, operation: Operation, key: str, body: dict[str, Any], target: str) -> Result:
        # The tombstone is written whether or not there is anything to undo: a forward call with
        # the target key that arrives later (a delayed retry) must not take effect.
        self.state.void(operation.service, target)
        effect = self.state.compensate(operation.service, target, key)
        if effect is None:
            return Result(200, {"status": operation.noop_status}, "noop")
        effect_id = _new_id(operation.id_prefix)
        self.state.append_ledger(operation.service, operation.name, key, effect_id, body)
        response: dict[str, Any] = {"status": operation.done_status}
        if operation.done_id_field:
            response[operation.done_id_field] = effect_id
        return Result(200, response, "applied")

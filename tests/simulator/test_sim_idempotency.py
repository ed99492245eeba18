"""Idempotency keys: replays, concurrency, reuse across operations and tombstones."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from simulator.client import SimulatorControl
from simulator.state import KeyedLocks

from .support import CHARGE, RESERVE, SHIP, Api, Response

FORWARD = [
    pytest.param("/inventory/reserve", RESERVE, id="reserve"),
    pytest.param("/payment/charge", CHARGE, id="charge"),
    pytest.param("/shipping/create", SHIP, id="create"),
]


def test_charge__same_key_twice__one_ledger_entry(api: Api, control: SimulatorControl) -> None:
    first = api.post("/payment/charge", CHARGE, key="ch-1")
    second = api.post("/payment/charge", CHARGE, key="ch-1")

    assert second.status == first.status == 200
    assert second.body == first.body
    assert len(control.ledger(key="ch-1")) == 1


@pytest.mark.parametrize(("path", "body"), FORWARD)
def test_forward__same_key_twice__same_body_one_ledger_entry(
    api: Api, control: SimulatorControl, path: str, body: dict
) -> None:
    first = api.post(path, body, key="k-1")
    second = api.post(path, body, key="k-1")

    assert (second.status, second.body) == (first.status, first.body)
    assert len(control.ledger()) == 1


def test_charge__replay_with_different_body__returns_first_response(
    api: Api, control: SimulatorControl
) -> None:
    first = api.post("/payment/charge", CHARGE, key="ch-1")

    replay = api.post("/payment/charge", {**CHARGE, "amount": "99.00"}, key="ch-1")

    assert replay.body == first.body
    [entry] = control.ledger()
    assert entry["payload"]["amount"] == "12.50"


def test_refund__same_key_twice__one_refund_entry_same_body(api: Api, control: SimulatorControl) -> None:
    api.post("/payment/charge", CHARGE, key="ch-1")

    first = api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-1")
    second = api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-1")

    assert second.body == first.body
    assert first.body["status"] == "refunded"
    assert len(control.ledger(operation="refund")) == 1


def _concurrently(calls: Sequence[Callable[[], Response]]) -> list[Response]:
    """Run ``calls`` in parallel threads released together by a barrier."""
    barrier = threading.Barrier(len(calls))

    def run(call: Callable[[], Response]) -> Response:
        barrier.wait()
        return call()

    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        return list(pool.map(run, calls))


@pytest.mark.parametrize(("path", "body"), FORWARD)
def test_forward__20_concurrent_requests_same_key__exactly_one_ledger_entry(
    api: Api, control: SimulatorControl, path: str, body: dict
) -> None:
    responses = _concurrently([lambda: api.post(path, body, key="race-1")] * 20)

    assert {r.status for r in responses} == {200}
    assert len({tuple(sorted(r.body.items())) for r in responses}) == 1
    assert len(control.ledger(key="race-1")) == 1
    assert control.stats()["services"][path.split("/")[1]][path.split("/")[2]] == {
        "applied": 1,
        "replayed": 19,
    }


def test_refund__20_concurrent_with_distinct_keys__exactly_one_refund(
    api: Api, control: SimulatorControl
) -> None:
    api.post("/payment/charge", CHARGE, key="ch-1")
    calls = [
        functools.partial(api.post, "/payment/refund", {"charge_key": "ch-1"}, key=f"rf-{i}")
        for i in range(20)
    ]

    responses = _concurrently(calls)

    assert sorted(r.body["status"] for r in responses) == ["nothing_to_refund"] * 19 + ["refunded"]
    assert len(control.ledger(operation="refund")) == 1


def test_charge_and_refund_racing__charge_never_left_unrefunded(api: Api, control: SimulatorControl) -> None:
    """A forward call and its compensation at the same time: either order is fine, but the
    charge must never stay in place once the refund has answered."""
    for round_ in range(10):
        key = f"ch-race-{round_}"
        charge, refund = _concurrently(
            [
                functools.partial(api.post, "/payment/charge", CHARGE, key=key),
                functools.partial(api.post, "/payment/refund", {"charge_key": key}, key=f"rf-{key}"),
            ]
        )

        charges = control.ledger(operation="charge", key=key)
        refunds = control.ledger(operation="refund", key=f"rf-{key}")
        assert len(charges) == len(refunds) <= 1
        if charge.status == 200:
            assert refund.body["status"] == "refunded"
        else:
            assert (charge.status, charge.body, refund.body) == (
                409,
                {"error": "voided"},
                {"status": "nothing_to_refund"},
            )


@pytest.mark.parametrize(
    ("first_path", "first_body", "second_path", "second_body"),
    [
        ("/payment/charge", CHARGE, "/inventory/reserve", RESERVE),
        ("/payment/charge", CHARGE, "/payment/refund", {"charge_key": "other"}),
        ("/shipping/cancel", {"shipment_key": "x"}, "/shipping/create", SHIP),
    ],
)
def test_key_reused_for_another_operation__422_no_effect(
    api: Api,
    control: SimulatorControl,
    first_path: str,
    first_body: dict,
    second_path: str,
    second_body: dict,
) -> None:
    api.post(first_path, first_body, key="shared")
    before = control.ledger()

    response = api.post(second_path, second_body, key="shared")

    assert (response.status, response.body) == (422, {"error": "idempotency_key_reused"})
    assert control.ledger() == before


def test_refund_before_charge__later_charge_409_voided_no_entry(api: Api, control: SimulatorControl) -> None:
    refund = api.post("/payment/refund", {"charge_key": "ch-late"}, key="rf-1")

    charge = api.post("/payment/charge", CHARGE, key="ch-late")

    assert refund.body == {"status": "nothing_to_refund"}
    assert (charge.status, charge.body) == (409, {"error": "voided"})
    assert control.ledger() == []


@pytest.mark.parametrize(
    ("forward_path", "forward_body", "comp_path", "comp_body"),
    [
        ("/inventory/reserve", RESERVE, "/inventory/release", {"reservation_key": "fwd"}),
        ("/shipping/create", SHIP, "/shipping/cancel", {"shipment_key": "fwd"}),
    ],
)
def test_compensation_before_forward__forward_voided(
    api: Api,
    control: SimulatorControl,
    forward_path: str,
    forward_body: dict,
    comp_path: str,
    comp_body: dict,
) -> None:
    api.post(comp_path, comp_body, key="comp")

    response = api.post(forward_path, forward_body, key="fwd")

    assert (response.status, response.body) == (409, {"error": "voided"})
    assert control.ledger() == []


def test_charge_refund_then_same_charge_key__409_voided_not_replayed(
    api: Api, control: SimulatorControl
) -> None:
    api.post("/payment/charge", CHARGE, key="ch-1")
    api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-1")

    late = api.post("/payment/charge", CHARGE, key="ch-1")

    assert (late.status, late.body) == (409, {"error": "voided"})
    assert [e["operation"] for e in control.ledger()] == ["charge", "refund"]


def test_tombstone__is_per_service(api: Api, control: SimulatorControl) -> None:
    api.post("/payment/refund", {"charge_key": "order-7"}, key="rf-1")

    response = api.post("/shipping/create", SHIP, key="order-7")

    assert response.status == 200
    assert len(control.ledger(service="shipping")) == 1


def test_keyed_locks__released_after_use__no_leak() -> None:
    locks = KeyedLocks()
    with locks.hold("b", "a", "a"):
        assert len(locks) == 2
    assert len(locks) == 0

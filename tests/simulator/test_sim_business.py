"""Happy paths and refusals of the six business operations."""

from __future__ import annotations

import pytest

from simulator.client import SimulatorControl

from .support import CHARGE, RESERVE, SHIP, Api

FORWARD_CALLS = [
    pytest.param("/inventory/reserve", RESERVE, "reservation_id", "res_", "reserved", id="reserve"),
    pytest.param("/payment/charge", CHARGE, "charge_id", "ch_", "charged", id="charge"),
    pytest.param("/shipping/create", SHIP, "shipment_id", "shp_", "created", id="create"),
]


def test_health__returns_ok(control: SimulatorControl) -> None:
    assert control.health() == {"status": "ok"}


@pytest.mark.parametrize(("path", "body", "id_field", "prefix", "status"), FORWARD_CALLS)
def test_forward__valid_body__200_and_one_ledger_entry(
    api: Api, control: SimulatorControl, path: str, body: dict, id_field: str, prefix: str, status: str
) -> None:
    response = api.post(path, body, key="fwd-1")

    assert response.status == 200
    assert response.body["status"] == status
    assert response.body[id_field].startswith(prefix)
    assert response.headers["Content-Type"] == "application/json"
    [entry] = control.ledger()
    service, operation = path.strip("/").split("/")
    assert entry["service"] == service
    assert entry["operation"] == operation
    assert entry["key"] == "fwd-1"
    assert entry["effect_id"] == response.body[id_field]
    assert entry["payload"] == body
    assert entry["seq"] == 1
    assert entry["at"]


def test_release__after_reserve__released_and_ledger_entry(api: Api, control: SimulatorControl) -> None:
    api.post("/inventory/reserve", RESERVE, key="res-1")

    response = api.post("/inventory/release", {"reservation_key": "res-1"}, key="rel-1")

    assert (response.status, response.body) == (200, {"status": "released"})
    [entry] = control.ledger(operation="release")
    assert entry["key"] == "rel-1"
    assert entry["payload"] == {"reservation_key": "res-1"}


def test_refund__after_charge__refunded_with_refund_id(api: Api, control: SimulatorControl) -> None:
    api.post("/payment/charge", CHARGE, key="ch-1")

    response = api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-1")

    assert response.status == 200
    assert response.body["status"] == "refunded"
    [entry] = control.ledger(operation="refund")
    assert entry["effect_id"] == response.body["refund_id"]
    assert entry["key"] == "rf-1"


def test_cancel__after_create__cancelled(api: Api, control: SimulatorControl) -> None:
    api.post("/shipping/create", SHIP, key="shp-1")

    response = api.post("/shipping/cancel", {"shipment_key": "shp-1"}, key="cnl-1")

    assert (response.status, response.body) == (200, {"status": "cancelled"})
    assert [e["operation"] for e in control.ledger(service="shipping")] == ["create", "cancel"]


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/inventory/release", {"reservation_key": "never-used"}, "nothing_to_release"),
        ("/payment/refund", {"charge_key": "never-used"}, "nothing_to_refund"),
        ("/shipping/cancel", {"shipment_key": "never-used"}, "nothing_to_cancel"),
    ],
)
def test_compensation__unknown_forward_key__nothing_to_undo_and_no_ledger_entry(
    api: Api, control: SimulatorControl, path: str, body: dict, status: str
) -> None:
    response = api.post(path, body, key="comp-1")

    assert (response.status, response.body) == (200, {"status": status})
    assert control.ledger() == []


def test_refund__second_refund_with_other_key__nothing_to_refund_one_refund_entry(
    api: Api, control: SimulatorControl
) -> None:
    api.post("/payment/charge", CHARGE, key="ch-1")

    first = api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-1")
    second = api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-2")

    assert first.body["status"] == "refunded"
    assert second.body == {"status": "nothing_to_refund"}
    assert len(control.ledger(operation="refund")) == 1


def test_charge__tok_decline__402_card_declined_no_ledger_entry(api: Api, control: SimulatorControl) -> None:
    response = api.post("/payment/charge", {**CHARGE, "card": "tok_decline"}, key="ch-d")

    assert (response.status, response.body) == (402, {"error": "card_declined"})
    assert control.ledger() == []


def test_charge__tok_decline_retried__same_402_replayed(api: Api, control: SimulatorControl) -> None:
    api.post("/payment/charge", {**CHARGE, "card": "tok_decline"}, key="ch-d")

    retry = api.post("/payment/charge", {**CHARGE, "card": "tok_decline"}, key="ch-d")

    assert (retry.status, retry.body) == (402, {"error": "card_declined"})
    assert control.ledger() == []
    assert control.stats()["services"]["payment"]["charge"] == {"refused": 1, "replayed": 1}


def test_reserve__out_of_stock_sku__409_no_ledger_entry(api: Api, control: SimulatorControl) -> None:
    body = {"items": [{"sku": "ABC", "quantity": 1}, {"sku": "OUT-OF-STOCK", "quantity": 1}]}

    response = api.post("/inventory/reserve", body, key="res-oos")

    assert (response.status, response.body) == (409, {"error": "out_of_stock"})
    assert control.ledger() == []


def test_release__after_out_of_stock_reserve__nothing_to_release(api: Api, control: SimulatorControl) -> None:
    api.post("/inventory/reserve", {"items": [{"sku": "OUT-OF-STOCK", "quantity": 1}]}, key="res-oos")

    response = api.post("/inventory/release", {"reservation_key": "res-oos"}, key="rel-oos")

    assert response.body == {"status": "nothing_to_release"}
    assert control.ledger() == []


ALL_PATHS = [
    ("/inventory/reserve", RESERVE),
    ("/inventory/release", {"reservation_key": "k"}),
    ("/payment/charge", CHARGE),
    ("/payment/refund", {"charge_key": "k"}),
    ("/shipping/create", SHIP),
    ("/shipping/cancel", {"shipment_key": "k"}),
]


@pytest.mark.parametrize(("path", "body"), ALL_PATHS)
def test_business_call__missing_idempotency_key__400_no_effect(
    api: Api, control: SimulatorControl, path: str, body: dict
) -> None:
    response = api.post(path, body, key=None)

    assert (response.status, response.body) == (400, {"error": "missing_idempotency_key"})
    assert control.ledger() == []


def test_business_call__blank_idempotency_key__400(api: Api, control: SimulatorControl) -> None:
    response = api.post("/payment/charge", CHARGE, key="   ")

    assert response.body == {"error": "missing_idempotency_key"}
    assert control.ledger() == []


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        pytest.param("/payment/charge", b'{"amount": "12.50", ', id="truncated-json"),
        pytest.param("/payment/charge", b"", id="empty-body"),
        pytest.param("/payment/charge", b"[1, 2]", id="not-an-object"),
        pytest.param("/payment/charge", b'{"amount": NaN, "currency": "EUR", "card": "x"}', id="nan"),
        pytest.param("/payment/charge", b'{"currency": "EUR", "card": "tok_ok"}', id="missing-amount"),
        pytest.param("/payment/charge", b'{"amount": 12.5, "currency": "EUR", "card": "tok_ok"}', id="float"),
        pytest.param("/payment/charge", b'{"amount": "-1", "currency": "EUR", "card": "tok_ok"}', id="neg"),
        pytest.param("/payment/charge", b'{"amount": "1", "currency": "euro", "card": "tok_ok"}', id="cur"),
        pytest.param("/inventory/reserve", b'{"items": []}', id="no-items"),
        pytest.param("/inventory/reserve", b'{"items": [{"sku": "A", "quantity": 0}]}', id="qty-0"),
        pytest.param("/inventory/reserve", b'{"items": [{"sku": "A", "quantity": true}]}', id="qty-bool"),
        pytest.param("/inventory/reserve", b'{"items": [{"quantity": 1}]}', id="no-sku"),
        pytest.param("/inventory/release", b'{"reservation_key": ""}', id="empty-target"),
        pytest.param("/shipping/create", b'{"items": [{"sku": "A"}]}', id="no-order-id"),
        pytest.param("/shipping/create", b'{"order_id": "o", "items": "A"}', id="items-not-list"),
        pytest.param("/shipping/cancel", b'{"shipment_key": 5}', id="target-not-str"),
        pytest.param("/payment/charge", b"\xff\xfe", id="not-utf8"),
    ],
)
def test_business_call__malformed_body__400_bad_request_no_effect(
    api: Api, control: SimulatorControl, path: str, raw: bytes
) -> None:
    response = api.post(path, key="bad-1", raw=raw)

    assert response.status == 400
    assert response.body["error"] == "bad_request"
    assert response.body["detail"]
    assert control.ledger() == []


def test_charge__bad_request_then_valid_with_same_key__applies(api: Api, control: SimulatorControl) -> None:
    """A 400 does not bind the key: the client may fix the body and retry with it."""
    api.post("/payment/charge", key="ch-1", raw=b"{")

    response = api.post("/payment/charge", CHARGE, key="ch-1")

    assert response.status == 200
    assert len(control.ledger()) == 1


def test_unknown_path__404(api: Api, control: SimulatorControl) -> None:
    response = api.post("/payment/teleport", CHARGE, key="k")

    assert (response.status, response.body) == (404, {"error": "not_found"})
    assert control.ledger() == []


def test_business_path_with_get__405(api: Api) -> None:
    response = api.request("GET", "/payment/charge")

    assert response.status == 405
    assert response.headers["Allow"] == "POST"

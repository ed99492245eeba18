"""Control endpoints (/_ledger, /_stats, /_reset, /_faults) and the HTTP plumbing."""

from __future__ import annotations

import pytest

from simulator.client import SimulatorControl, SimulatorError

from .support import CHARGE, RESERVE, SHIP, Api


def _populate(api: Api) -> None:
    api.post("/inventory/reserve", RESERVE, key="res-1")
    api.post("/payment/charge", CHARGE, key="ch-1")
    api.post("/payment/charge", CHARGE, key="ch-2")
    api.post("/payment/refund", {"charge_key": "ch-1"}, key="rf-1")
    api.post("/shipping/create", SHIP, key="shp-1")


def test_ledger__lists_every_effect_in_order(api: Api, control: SimulatorControl) -> None:
    _populate(api)

    entries = control.ledger()

    assert [e["seq"] for e in entries] == [1, 2, 3, 4, 5]
    assert [(e["service"], e["operation"], e["key"]) for e in entries] == [
        ("inventory", "reserve", "res-1"),
        ("payment", "charge", "ch-1"),
        ("payment", "charge", "ch-2"),
        ("payment", "refund", "rf-1"),
        ("shipping", "create", "shp-1"),
    ]
    assert set(entries[0]) == {"seq", "service", "operation", "key", "effect_id", "payload", "at"}


@pytest.mark.parametrize(
    ("filters", "keys"),
    [
        ({"service": "payment"}, ["ch-1", "ch-2", "rf-1"]),
        ({"operation": "charge"}, ["ch-1", "ch-2"]),
        ({"key": "shp-1"}, ["shp-1"]),
        ({"service": "payment", "operation": "refund"}, ["rf-1"]),
        ({"service": "inventory", "key": "ch-1"}, []),
    ],
)
def test_ledger__filters(api: Api, control: SimulatorControl, filters: dict, keys: list[str]) -> None:
    _populate(api)

    assert [e["key"] for e in control.ledger(**filters)] == keys


def test_ledger__unknown_filter__400(api: Api) -> None:
    response = api.request("GET", "/_ledger?servise=payment")

    assert response.status == 400
    assert response.body["error"] == "bad_request"


def test_stats__counts_per_service_operation_outcome(api: Api, control: SimulatorControl) -> None:
    api.post("/payment/charge", CHARGE, key="ch-1")
    api.post("/payment/charge", CHARGE, key="ch-1")
    api.post("/payment/charge", {**CHARGE, "card": "tok_decline"}, key="ch-2")
    api.post("/payment/charge", CHARGE, key=None)
    api.post("/inventory/reserve", key="res-1", raw=b"{")
    control.set_faults("shipping", transient_rate=1.0)
    api.post("/shipping/create", SHIP, key="shp-1")

    stats = control.stats()

    assert stats["total"] == 6
    assert stats["services"] == {
        "payment": {"charge": {"applied": 1, "replayed": 1, "refused": 1, "missing_key": 1}},
        "inventory": {"reserve": {"bad_request": 1}},
        "shipping": {"create": {"fault_transient": 1}},
    }


def test_reset__clears_ledger_idempotency_tombstones_faults_and_stats(
    api: Api, control: SimulatorControl
) -> None:
    first = api.post("/payment/charge", CHARGE, key="ch-1")
    api.post("/payment/refund", {"charge_key": "ch-void"}, key="rf-1")
    control.set_faults("inventory", down=True)

    control.reset()

    assert control.ledger() == []
    assert control.stats() == {"total": 0, "services": {}}
    assert not control.faults()["inventory"]["down"]
    again = api.post("/payment/charge", CHARGE, key="ch-1")
    assert again.status == 200
    assert again.body["charge_id"] != first.body["charge_id"]  # the key was forgotten
    assert api.post("/payment/charge", CHARGE, key="ch-void").status == 200  # the tombstone too
    assert api.post("/inventory/reserve", RESERVE, key="res-1").status == 200


def test_get_faults__lists_all_services(control: SimulatorControl) -> None:
    faults = control.faults()

    assert set(faults) == {"inventory", "payment", "shipping"}
    assert faults["payment"] == {
        "latency_ms": 0.0,
        "transient_rate": 0.0,
        "permanent_rate": 0.0,
        "lost_reply_rate": 0.0,
        "hang": False,
        "down": False,
        "seed": None,
    }


def test_delete_service_faults__clears_only_that_service(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", down=True)
    control.set_faults("shipping", down=True)

    response = api.request("DELETE", "/_faults/payment")

    assert response.status == 200
    assert not control.faults()["payment"]["down"]
    assert control.faults()["shipping"]["down"]


def test_keep_alive__many_requests_on_one_connection(api: Api, control: SimulatorControl) -> None:
    conn = api.connect()
    try:
        statuses = [api.post("/payment/charge", CHARGE, key=f"ch-{i}", conn=conn).status for i in range(50)]
        sock = conn.sock
        assert sock is not None
        assert api.post("/payment/charge", CHARGE, key="ch-last", conn=conn).status == 200
        assert conn.sock is sock  # same TCP connection all along
    finally:
        conn.close()
    assert statuses == [200] * 50
    assert len(control.ledger()) == 51


def test_control_client__rejects_non_http_url() -> None:
    with pytest.raises(ValueError, match="http"):
        SimulatorControl("file:///etc/passwd")


def test_control_client__error_status__raises_simulator_error(control: SimulatorControl) -> None:
    with pytest.raises(SimulatorError) as excinfo:
        control.set_faults("payment", bogus=1)

    assert excinfo.value.status == 400


def test_unknown_control_path__404(api: Api) -> None:
    response = api.request("GET", "/_nothing_here")

    assert (response.status, response.body) == (404, {"error": "not_found"})

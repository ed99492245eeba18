"""Runtime fault injection: latency, transient, permanent, lost reply, hang, down."""

from __future__ import annotations

import threading
import time

import pytest

from simulator.client import SimulatorControl, SimulatorError

from .support import CHARGE, RESERVE, SHIP, Api, Response

SERVICE_CALLS = [
    pytest.param("inventory", "/inventory/reserve", RESERVE, id="inventory"),
    pytest.param("payment", "/payment/charge", CHARGE, id="payment"),
    pytest.param("shipping", "/shipping/create", SHIP, id="shipping"),
]


def test_latency__response_takes_at_least_latency(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", latency_ms=300)

    started = time.monotonic()
    response = api.post("/payment/charge", CHARGE, key="ch-1")
    elapsed = time.monotonic() - started

    assert response.status == 200
    assert elapsed >= 0.3


def test_latency__only_delays_the_faulted_service(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", latency_ms=5000)

    response = api.post("/inventory/reserve", RESERVE, key="res-1", timeout=2.0)

    assert response.status == 200


@pytest.mark.parametrize(("service", "path", "body"), SERVICE_CALLS)
def test_transient__rate_1__503_unavailable_no_effect(
    api: Api, control: SimulatorControl, service: str, path: str, body: dict
) -> None:
    control.set_faults(service, transient_rate=1.0)

    response = api.post(path, body, key="k-1")

    assert (response.status, response.body) == (503, {"error": "unavailable"})
    assert control.ledger() == []


def test_transient__retry_same_key_after_recovery__applies_once(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", transient_rate=1.0)
    api.post("/payment/charge", CHARGE, key="ch-1")
    control.clear_faults()

    retry = api.post("/payment/charge", CHARGE, key="ch-1")

    assert retry.status == 200
    assert len(control.ledger()) == 1


@pytest.mark.parametrize(
    ("service", "path", "body", "status", "error"),
    [
        ("inventory", "/inventory/reserve", RESERVE, 422, "rejected"),
        ("payment", "/payment/charge", CHARGE, 402, "card_declined"),
        ("shipping", "/shipping/create", SHIP, 422, "rejected"),
    ],
)
def test_permanent__rate_1__refused_no_effect(
    api: Api, control: SimulatorControl, service: str, path: str, body: dict, status: int, error: str
) -> None:
    control.set_faults(service, permanent_rate=1.0)

    response = api.post(path, body, key="k-1")

    assert (response.status, response.body) == (status, {"error": error})
    assert control.ledger() == []


def test_permanent__retry_same_key_after_clearing__same_refusal_replayed(
    api: Api, control: SimulatorControl
) -> None:
    control.set_faults("inventory", permanent_rate=1.0)
    api.post("/inventory/reserve", RESERVE, key="res-1")
    control.clear_faults()

    retry = api.post("/inventory/reserve", RESERVE, key="res-1")

    assert (retry.status, retry.body) == (422, {"error": "rejected"})
    assert control.ledger() == []


def test_lost_reply__connection_error_but_effect_applied_and_retry_returns_stored_200(
    api: Api, control: SimulatorControl
) -> None:
    control.set_faults("payment", lost_reply_rate=1.0)

    with pytest.raises(ConnectionError):
        api.post("/payment/charge", CHARGE, key="ch-lost")

    [entry] = control.ledger(key="ch-lost")
    control.clear_faults()
    retry = api.post("/payment/charge", CHARGE, key="ch-lost")
    assert retry.status == 200
    assert retry.body == {"charge_id": entry["effect_id"], "status": "charged"}
    assert len(control.ledger(key="ch-lost")) == 1


def test_lost_reply__on_keep_alive_connection__connection_error(api: Api, control: SimulatorControl) -> None:
    conn = api.connect()
    try:
        assert api.post("/shipping/create", SHIP, key="s-1", conn=conn).status == 200
        control.set_faults("shipping", lost_reply_rate=1.0)

        with pytest.raises(ConnectionError):
            api.post("/shipping/create", SHIP, key="s-2", conn=conn)
    finally:
        conn.close()
    assert [e["key"] for e in control.ledger()] == ["s-1", "s-2"]


def test_hang__client_times_out_and_no_effect(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", hang=True)

    with pytest.raises(TimeoutError):
        api.post("/payment/charge", CHARGE, key="ch-hang", timeout=0.5)

    assert control.ledger() == []
    assert control.health() == {"status": "ok"}


def test_hang__cleared__held_request_closed_without_response(api: Api, control: SimulatorControl) -> None:
    control.set_faults("shipping", hang=True)
    outcome: list[BaseException | Response] = []

    def call() -> None:
        try:
            outcome.append(api.post("/shipping/create", SHIP, key="s-hang", timeout=30))
        except BaseException as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    # Wait until the server holds the request (visible in stats), then lift the hang.
    deadline = time.monotonic() + 10
    while control.stats()["services"].get("shipping", {}).get("create", {}).get("fault_hang") != 1:
        assert time.monotonic() < deadline, "request never reached the simulator"
        time.sleep(0.01)
    control.set_faults("shipping", hang=False)
    caller.join(timeout=10)

    assert not caller.is_alive()
    assert len(outcome) == 1
    assert isinstance(outcome[0], ConnectionError)
    assert control.ledger() == []


@pytest.mark.parametrize(("service", "path", "body"), SERVICE_CALLS)
def test_down__connection_error_no_effect(
    api: Api, control: SimulatorControl, service: str, path: str, body: dict
) -> None:
    control.set_faults(service, down=True)

    with pytest.raises(ConnectionError):
        api.post(path, body, key="k-down")

    assert control.ledger() == []


def test_down__other_services_and_control_still_answer(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", down=True)

    assert api.post("/inventory/reserve", RESERVE, key="res-1").status == 200
    assert control.health() == {"status": "ok"}


def test_down__cleared__same_key_applies_once(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", down=True)
    with pytest.raises(ConnectionError):
        api.post("/payment/charge", CHARGE, key="ch-1")
    control.set_faults("payment", down=False)

    response = api.post("/payment/charge", CHARGE, key="ch-1")

    assert response.status == 200
    assert len(control.ledger()) == 1


def _outcomes(api: Api, control: SimulatorControl, seed: int) -> list[int]:
    control.reset()
    control.set_faults("payment", transient_rate=0.5, seed=seed)
    return [api.post("/payment/charge", CHARGE, key=f"ch-{i}").status for i in range(30)]


def test_seed__same_seed_same_sequence_of_faults(api: Api, control: SimulatorControl) -> None:
    first = _outcomes(api, control, seed=42)
    second = _outcomes(api, control, seed=42)

    assert first == second
    assert set(first) == {200, 503}


def test_set_faults__merges_into_existing(control: SimulatorControl) -> None:
    control.set_faults("payment", latency_ms=10)

    faults = control.set_faults("payment", transient_rate=0.25)

    assert faults["latency_ms"] == 10
    assert faults["transient_rate"] == 0.25
    assert control.faults()["inventory"]["transient_rate"] == 0


@pytest.mark.parametrize(
    "update",
    [
        {"explode": True},
        {"transient_rate": 1.5},
        {"transient_rate": -0.1},
        {"lost_reply_rate": "0.5"},
        {"latency_ms": -1},
        {"latency_ms": True},
        {"hang": 1},
        {"down": "yes"},
        {"seed": 1.5},
        {"latency_ms": 10, "unknown": 1},
    ],
)
def test_set_faults__invalid_update__400_and_nothing_changed(control: SimulatorControl, update: dict) -> None:
    before = control.faults()

    with pytest.raises(SimulatorError) as excinfo:
        control.set_faults("payment", **update)

    assert excinfo.value.status == 400
    assert isinstance(excinfo.value.body, dict)
    assert excinfo.value.body["error"] == "bad_request"
    assert control.faults() == before


def test_set_faults__body_not_an_object__400(api: Api, control: SimulatorControl) -> None:
    response = api.request("PUT", "/_faults/payment", b"[1]")

    assert response.status == 400
    assert control.faults()["payment"]["transient_rate"] == 0


def test_set_faults__unknown_service__404(control: SimulatorControl) -> None:
    with pytest.raises(SimulatorError) as excinfo:
        control.set_faults("teleport", down=True)

    assert excinfo.value.status == 404


def test_clear_faults__restores_defaults(api: Api, control: SimulatorControl) -> None:
    control.set_faults("payment", down=True, latency_ms=50)
    control.set_faults("shipping", transient_rate=1.0)

    control.clear_faults()

    assert all(
        not f["down"] and f["latency_ms"] == 0 and f["transient_rate"] == 0 for f in control.faults().values()
    )
    assert api.post("/payment/charge", CHARGE, key="ch-1").status == 200


def test_health__never_faulted(control: SimulatorControl) -> None:
    for service in ("inventory", "payment", "shipping"):
        control.set_faults(service, down=True, transient_rate=1.0)

    assert control.health() == {"status": "ok"}

"""/echo: the generic endpoint HTTP-call jobs are tested against."""

from __future__ import annotations

from simulator.client import SimulatorControl

from .support import Api


def test_echo__any_method__answers_what_it_received_and_ledgers_it(
    api: Api, control: SimulatorControl
) -> None:
    put = api.request("PUT", "/echo/a/b?x=1", b'{"hello": "world"}')
    patch = api.request("PATCH", "/echo", b"raw text")

    assert put.status == 200
    assert put.body["method"] == "PUT" and put.body["path"] == "/echo/a/b"
    assert put.body["query"] == {"x": "1"} and put.body["body"] == '{"hello": "world"}'
    assert patch.status == 200 and patch.body["method"] == "PATCH" and patch.body["body"] == "raw text"
    assert [(e["service"], e["operation"]) for e in control.ledger(service="echo")] == [
        ("echo", "put"),
        ("echo", "patch"),
    ]


def test_echo__fail_times__first_calls_per_key_fail_then_200(api: Api, control: SimulatorControl) -> None:
    statuses = [api.post("/echo?status=503&fail_times=2", {}, key="k1").status for _ in range(3)]
    other_key = api.post("/echo?status=503&fail_times=2", {}, key="k2")

    assert statuses == [503, 503, 200]
    assert other_key.status == 503 and other_key.body["call"] == 1
    assert len(control.ledger(service="echo", key="k1")) == 1
    assert control.ledger(service="echo", key="k2") == []


def test_echo__status_without_fail_times__always_that_status(api: Api) -> None:
    assert [api.post("/echo?status=404", {}, key="k").status for _ in range(2)] == [404, 404]
    bad = api.post("/echo?status=abc", {}, key="k")
    assert bad.status == 400 and "echo" in bad.body["detail"]

"""The simulator as a process: CLI, environment, signals, logging."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from simulator.client import SimulatorControl

from .support import CHARGE, Api, start_simulator


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal__clean_shutdown_exit_code_0(tmp_path: Path, sig: int) -> None:
    proc = start_simulator(tmp_path / "stderr.log")
    assert SimulatorControl(proc.url).health() == {"status": "ok"}

    returncode = proc.stop(sig)

    assert returncode == 0
    assert proc.stderr() == ""


def test_signal__shutdown_while_a_request_hangs__exit_code_0(tmp_path: Path) -> None:
    proc = start_simulator(tmp_path / "stderr.log")
    SimulatorControl(proc.url).set_faults("payment", hang=True)
    with pytest.raises(TimeoutError):
        Api(proc.url).post("/payment/charge", CHARGE, key="ch-1", timeout=0.3)

    assert proc.stop(signal.SIGTERM) == 0
    assert "Traceback" not in proc.stderr()


def test_port_from_environment__simulator_port_0__listens_on_free_port(tmp_path: Path) -> None:
    proc = start_simulator(tmp_path / "stderr.log", args=(), env={"SIMULATOR_PORT": "0"})
    try:
        assert proc.url.startswith("http://127.0.0.1:")
        assert not proc.url.endswith(":8055")
        assert SimulatorControl(proc.url).health() == {"status": "ok"}
    finally:
        assert proc.stop() == 0


def test_logging__quiet_by_default_and_verbose_logs_requests(tmp_path: Path) -> None:
    quiet = start_simulator(tmp_path / "quiet.log")
    verbose = start_simulator(tmp_path / "verbose.log", args=("--port", "0", "--verbose"))
    try:
        for proc in (quiet, verbose):
            assert Api(proc.url).post("/payment/charge", CHARGE, key="ch-1").status == 200
    finally:
        quiet.stop()
        verbose.stop()

    assert quiet.stderr() == ""
    assert '"POST /payment/charge HTTP/1.1" 200' in verbose.stderr()


def test_port_in_use__exits_non_zero_with_message(tmp_path: Path) -> None:
    first = start_simulator(tmp_path / "first.log")
    port = first.url.rsplit(":", 1)[1]
    try:
        with pytest.raises(pytest.fail.Exception, match="did not start"):
            start_simulator(tmp_path / "second.log", args=("--port", port))
    finally:
        first.stop()

    assert "cannot listen" in (tmp_path / "second.log").read_text()


def test_journal__killed_9_and_restarted__keeps_ledger_replays_and_tombstones(tmp_path: Path) -> None:
    """With --journal the simulator comes back from a kill -9 knowing what it did (issue 22's
    soak kills it): a retried charge replays the stored answer (no second effect), a refunded
    charge stays voided, and the ledger and its sequence go on."""
    journal = tmp_path / "sim.journal"
    args = ("--port", "0", "--journal", str(journal))
    first = start_simulator(tmp_path / "first.log", args=args)
    api = Api(first.url)
    charged = api.post("/payment/charge", CHARGE, key="ch-1")
    api.post("/payment/charge", CHARGE, key="ch-2")
    assert api.post("/payment/refund", {"charge_key": "ch-2"}, key="re-2").status == 200
    before = SimulatorControl(first.url).ledger()
    first.stop(signal.SIGKILL)

    second = start_simulator(tmp_path / "second.log", args=args)
    try:
        api = Api(second.url)
        replay = api.post("/payment/charge", CHARGE, key="ch-1")
        voided = api.post("/payment/charge", CHARGE, key="ch-2")
        api.post("/payment/charge", CHARGE, key="ch-3")
        after = SimulatorControl(second.url).ledger()
    finally:
        second.stop()

    assert (replay.status, replay.body) == (200, charged.body)
    assert (voided.status, voided.body) == (409, {"error": "voided"})
    assert after[:3] == before
    assert [(e["seq"], e["key"]) for e in after] == [(1, "ch-1"), (2, "ch-2"), (3, "re-2"), (4, "ch-3")]


def test_journal__reset__forgets_it_for_the_next_start(tmp_path: Path) -> None:
    journal = tmp_path / "sim.journal"
    args = ("--port", "0", "--journal", str(journal))
    first = start_simulator(tmp_path / "first.log", args=args)
    Api(first.url).post("/payment/charge", CHARGE, key="ch-1")
    SimulatorControl(first.url).reset()
    first.stop()
    second = start_simulator(tmp_path / "second.log", args=args)
    try:
        assert SimulatorControl(second.url).ledger() == []
    finally:
        second.stop()

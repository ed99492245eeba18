"""Fixtures that run the real simulator as a subprocess (``python -m simulator --port 0``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from simulator.client import SimulatorControl

from .support import Api, SimulatorProcess, start_simulator


@pytest.fixture(scope="session")
def simulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatorProcess]:
    proc = start_simulator(tmp_path_factory.mktemp("simulator") / "stderr.log")
    yield proc
    proc.stop()


@pytest.fixture
def control(simulator: SimulatorProcess) -> Iterator[SimulatorControl]:
    """A control client on a freshly reset simulator; fails the test if the server logged a traceback."""
    sim = SimulatorControl(simulator.url)
    sim.reset()
    yield sim
    sim.reset()  # also releases requests held by a `hang` fault
    assert "Traceback" not in simulator.stderr(), simulator.stderr()


@pytest.fixture
def api(control: SimulatorControl, simulator: SimulatorProcess) -> Api:
    return Api(simulator.url)

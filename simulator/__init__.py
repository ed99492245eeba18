"""Simulated remote services (inventory, payment, shipping) with idempotency and fault injection.

A separate process, standard library only, no Django: ``python -m simulator --port 8055``.
See ``docs/developing/simulator.md`` for the HTTP contract and `simulator.client.SimulatorControl` for the
control client used by tests and the demo. All state (ledger, idempotency store, tombstones,
faults, stats) is in memory: restarting the simulator loses it.
"""

from __future__ import annotations

from simulator.faults import SERVICES

__all__ = ["SERVICES"]

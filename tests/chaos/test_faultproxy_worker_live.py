"""A real Celery agent worker whose PostgreSQL and broker connections go through fault proxies
(chaos/faultproxy.py, issue 22) survives a storm of connection resets: every order still reaches
a terminal state, and no remote effect happens twice for one idempotency key."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from chaos.faultproxy import FaultProxy
from scheduler.models import Run

from ..e2e.helpers import submit_order, wait_run
from ..harness import wait_for
from .network import _hostport, _moved

ORDERS = 6


@pytest.fixture
def agents_outside_stopped(engine) -> Iterator[None]:
    engine.agents.stop()
    try:
        yield
    finally:
        engine.agents.start(ready_marker=" ready.")


def test_agent_worker_through_proxies__reset_storm__every_order_terminal_no_effect_twice(
    engine, agents_outside_stopped, worker_env, demo_user, start_worker
):
    with (
        FaultProxy(upstream=_hostport(worker_env["DATABASE_URL"], 5432)) as pg,
        FaultProxy(upstream=_hostport(worker_env["REDIS_URL"], 6379)) as broker,
    ):
        redis_url = _moved(worker_env["REDIS_URL"], "127.0.0.1", broker.port)
        agent = start_worker(
            name="proxied-agents",
            DATABASE_URL=_moved(worker_env["DATABASE_URL"], "127.0.0.1", pg.port),
            REDIS_URL=redis_url,
            CELERY_BROKER_URL=redis_url,
        )
        # Slow enough that resets land inside calls and replies, not only between them.
        engine.sim.set_faults("payment", latency_ms=300)
        stop = threading.Event()

        def storm() -> None:
            while not stop.wait(0.4):
                pg.reset_all()
                broker.reset_all()

        storming = threading.Thread(target=storm, daemon=True)
        storming.start()
        try:
            orders = [submit_order(demo_user) for _ in range(ORDERS)]
            # The storm goes on until it has cut live connections of both kinds several times.
            wait_for(
                lambda: pg.stats()["reset"] >= 5 and broker.stats()["reset"] >= 5,
                timeout=60,
                what="the storm to reset live connections",
            )
        finally:
            stop.set()
            storming.join(timeout=10)
        runs = [
            wait_run(o.run_id, (Run.State.COMPLETED, Run.State.COMPENSATED, Run.State.FAILED), timeout=90)
            for o in orders
        ]
        assert agent.alive()
        print(
            "reset storm:",
            Counter(r.state for r in runs),
            "postgres",
            {k: pg.stats()[k] for k in ("opened", "reset")},
            "broker",
            {k: broker.stats()[k] for k in ("opened", "reset")},
        )

    assert all(r.state in (Run.State.COMPLETED, Run.State.COMPENSATED) for r in runs), [r.state for r in runs]
    assert any(r.state == Run.State.COMPLETED for r in runs)
    ledger = engine.sim.ledger()
    ours = {str(r.id) for r in runs}
    forward = Counter(
        (e["service"], e["operation"], e["key"])
        for e in ledger
        if str(e["key"]).split(":", 1)[0] in ours and e["operation"] in ("reserve", "charge", "create")
    )
    assert forward and set(forward.values()) == {1}, forward
    # Every completed order has exactly one reservation, payment and shipment.
    for run in runs:
        if run.state == Run.State.COMPLETED:
            mine = Counter(op for (_, op, key) in forward if key.startswith(f"{run.id}:"))
            assert mine == {"reserve": 1, "charge": 1, "create": 1}, (run.id, mine)

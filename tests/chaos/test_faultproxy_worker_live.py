"""A real Celery agent worker whose PostgreSQL and broker connections go through fault proxies
(chaos/faultproxy.py, issue 22) survives a storm of connection resets: every order still reaches
a terminal state, and no remote effect happens twice for one idempotency key."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest

from chaos.faultproxy import FaultProxy
from scheduler.models import Run

from ..e2e.helpers import submit_order, wait_run
from .network import _hostport, _moved

ORDERS = 6
STORM_ROUNDS = 6
STORM_EVERY = 1.5


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
            # Persistent connections, as in production (settings: 300 s; tests use 0): the
            # storm then cuts PostgreSQL connections the worker holds and will reuse.
            DATABASE_CONN_MAX_AGE="300",
        )
        # Slow enough that resets land inside calls and replies, not only between them.
        engine.sim.set_faults("payment", latency_ms=300)
        orders = [submit_order(demo_user) for _ in range(ORDERS)]
        # The storm: every open connection of the worker, to PostgreSQL and to the broker, reset
        # every STORM_EVERY seconds, STORM_ROUNDS times, while the orders run; then calm.
        hit = {"postgres": 0, "broker": 0}
        for _ in range(STORM_ROUNDS):
            time.sleep(STORM_EVERY)
            hit["postgres"] += pg.reset_all()
            hit["broker"] += broker.reset_all()
        runs = [
            wait_run(o.run_id, (Run.State.COMPLETED, Run.State.COMPENSATED, Run.State.FAILED), timeout=60)
            for o in orders
        ]
        assert agent.alive()
        # Live connections of both kinds were cut.
        assert hit["broker"] >= STORM_ROUNDS and hit["postgres"] > 0, hit
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

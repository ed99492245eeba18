"""What differs on RabbitMQ (issue 22), on real workers.

RabbitMQ killed -9 and started again mid-run: the machine's RabbitMQ is shared, so
the test runs a private rabbitmq-server node (sastools/rabbit.py) with its own engine on it: orders
are in flight (a charge takes 1.5 s) when the node dies; messages it had not written to disk are
lost, workers reconnect when it is back, and the supervisor takes back every step whose request
or reply the crash ate. Every order completes, each charged exactly once."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from sastools.harness import (
    AGENT_QUEUES,
    CONTROL_QUEUES,
    Proc,
    celery_beat,
    celery_worker,
    publishing_to,
    wait_for,
)
from sastools.rabbit import PrivateRabbit, rabbitmqctl, session_vhost
from scheduler.models import Run, Step
from simulator.client import SimulatorControl

from .helpers import submit_order, wait_run

ORDERS = 6


@pytest.fixture
def private_rabbit() -> Iterator[PrivateRabbit]:
    rabbit = PrivateRabbit().start()
    yield rabbit
    rabbit.close()


@pytest.fixture
def rabbit_engine(
    private_rabbit: PrivateRabbit, engine_paused: None, simulator_session: Proc, worker_env, tmp_path: Path
) -> Iterator[tuple[dict[str, str], SimulatorControl]]:
    with _engine_on({**worker_env, "CELERY_BROKER_URL": private_rabbit.url()}, tmp_path) as running:
        yield running


@contextlib.contextmanager
def _engine_on(
    env: dict[str, str], tmp_path: Path, *, agents: bool = True
) -> Iterator[tuple[dict[str, str], SimulatorControl]]:
    """A control worker, an agents worker (unless not `agents`: the test starts its own) and
    beat on `env`'s broker; the test process publishes there."""
    procs = [celery_worker(name="control", queues=CONTROL_QUEUES, log_dir=tmp_path, env=env)]
    if agents:
        agent_worker = celery_worker(
            name="agents", queues=AGENT_QUEUES, log_dir=tmp_path, env=env, concurrency=4
        )
        procs.append(agent_worker)
    beat = celery_beat(log_dir=tmp_path, env=env)
    sim = SimulatorControl(os.environ["SIMULATOR_URL"])
    sim.reset()
    try:
        for proc in procs:
            proc.start(ready_marker=" ready.")
        beat.start(ready_marker="beat: Starting")
        procs.append(beat)
        queue_type = env.get("SAS_BROKER_QUEUE_TYPE", "classic")
        with publishing_to(env["CELERY_BROKER_URL"], queue_type=queue_type):
            yield env, sim
    finally:
        for proc in procs:
            proc.stop()
        sim.reset()


def test_rabbitmq_killed_and_restarted_mid_run__every_order_completes_charged_once(
    private_rabbit, rabbit_engine, demo_user
):
    _, sim = rabbit_engine
    sim.set_faults("payment", latency_ms=1500)
    orders = [submit_order(demo_user) for _ in range(ORDERS)]
    wait_for(
        lambda: Step.objects.filter(name="charge_payment", process_state=Step.State.PROCESSING).exists(),
        timeout=30,
        what="a charge in flight",
    )

    private_rabbit.kill()  # kill -9: no goodbye to any connection
    sim.set_faults("payment", latency_ms=0)
    private_rabbit.start()

    for order in orders:
        wait_run(order.run_id, (Run.State.COMPLETED,), timeout=120)
    charges = sim.ledger(service="payment", operation="charge")
    keys = sorted(str(c["key"]) for c in charges)
    assert len(keys) == ORDERS and len(set(keys)) == ORDERS  # one charge per order, none twice
    charge_keys = sorted(Step.objects.filter(name="charge_payment").values_list("idempotency_key", flat=True))
    assert keys == sorted(str(k) for k in charge_keys)


def test_quorum_queues__orders_with_retries_complete__every_queue_is_quorum(
    engine_paused, simulator_session, worker_env, demo_user, tmp_path
):
    # SAS_BROKER_QUEUE_TYPE=quorum on a vhost of its own: every queue Celery declares is a quorum
    # queue (behind a topic exchange); the workers run without global QoS, and countdowns (the
    # scheduler's kicks after a retry's backoff: a transient fault at the payment service) go
    # through RabbitMQ's native delayed delivery.
    with session_vhost(f"sas-test-{os.getpid()}-quorum") as vhost:
        env = {**worker_env, "CELERY_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{vhost}"}
        env["SAS_BROKER_QUEUE_TYPE"] = "quorum"
        with _engine_on(env, tmp_path) as (_, sim):
            sim.set_faults("payment", transient_rate=0.5, seed=7)
            orders = [submit_order(demo_user) for _ in range(3)]
            for order in orders:
                wait_run(order.run_id, (Run.State.COMPLETED,), timeout=90)
            queues = dict(
                line.split("\t")
                for line in rabbitmqctl(
                    "list_queues", "-p", vhost, "name", "type", "--no-table-headers", "-q"
                )
                .strip()
                .splitlines()
            )
            transient = sim.stats()["services"]["payment"]["charge"].get("fault_transient", 0)
            charges = sim.ledger(service="payment", operation="charge")
        assert transient >= 1  # some charges were retried (after a countdown)
        assert len(charges) == 3  # one each
        for name in ("scheduler", "supervisor", "agent.inventory", "agent.payment", "agent.shipping"):
            assert queues.get(name) == "quorum", queues
        log = (tmp_path / "agents.log").read_text()
        assert "Global QoS is disabled" in log, log[-2000:]
        # Native delayed delivery bound every queue (topic exchanges): countdowns wait in
        # RabbitMQ, not unacked in a worker (tests/e2e/test_consumer_timeout_live.py).
        for name in ("agents.log", "control.log"):
            assert "do not support direct exchanges" not in (tmp_path / name).read_text()

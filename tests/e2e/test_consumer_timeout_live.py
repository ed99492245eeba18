"""RabbitMQ's consumer_timeout, fired for real (issue 22, "Both brokers").

RabbitMQ closes a consumer's channel when it holds a delivery unacknowledged longer than
`consumer_timeout` (30 min by default), and puts the delivery back in its queue. Celery holds
two kinds of delivery unacknowledged: a late-acked task while it runs (`task_acks_late`) and
an ETA/countdown task while it waits for its time. Celery's worker (5.7) does not survive the
closed channel: it logs "Unrecoverable error: PreconditionFailed" and exits (celery/celery#6760).

A private rabbitmq-server node (sastools/rabbit.py) with a 3 s consumer_timeout - checked on a
250 ms channel tick instead of the default minute - shows each case, and what keeps us safe:

- a late-acked order step that runs past it: the channel closes, the worker exits, the request
  is delivered again to the next worker (a process manager's restart), and the fence and the
  idempotency key make it harmless: the order completes with one charge;
- a heartbeat step (the export) that runs past it: its message is acked when the worker starts
  it (agents/long.py), so nothing is held: it completes in one attempt, the worker lives on;
- a countdown longer than it: on classic queues the worker holds the message and exits (kicks
  are hints - the next worker runs it, harmlessly); on quorum queues (topic exchanges, Celery's
  native delayed delivery) RabbitMQ keeps it, the worker holds nothing and runs it on time.

Our settings keep every hold below the timeout (tests/deploy/test_brokers.py): this file shows
what happens when a deployment breaks that rule, and that nothing is lost or done twice.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import current_app

from exports.services import export_request
from orders.workflows import build_order_workflow
from sastools.harness import Proc, celery_worker, publishing_to, wait_for
from sastools.rabbit import PrivateRabbit, rabbitmqctl
from scheduler import workflows
from scheduler.models import HeartbeatStatus, Run, Step, TaskExecutionHistory

from .helpers import submit_order, wait_run
from .test_rabbitmq_live import _engine_on

TIMEOUT_MS = 3000
CLOSED = "Unrecoverable error: PreconditionFailed"
BROKER_TIMED_OUT = "has timed out waiting for delivery acknowledgement"


@pytest.fixture(scope="module")
def short_rabbit() -> Iterator[PrivateRabbit]:
    rabbit = PrivateRabbit(consumer_timeout_ms=TIMEOUT_MS, tick_ms=250).start()
    yield rabbit
    rabbit.close()


@pytest.fixture
def vhost(short_rabbit: PrivateRabbit, request: pytest.FixtureRequest) -> str:
    """A vhost of the test's own on the private node (no queue left over from another test)."""
    name = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower())[:60]
    rabbitmqctl("add_vhost", name, node=short_rabbit.node)
    rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*", node=short_rabbit.node)
    return name


def _server_log_from(rabbit: PrivateRabbit, offset: int) -> str:
    return rabbit.log_path.read_text(errors="replace")[offset:]


def _received_ids(proc: Proc, task: str) -> list[str]:
    return re.findall(rf"Task {re.escape(task)}\[([0-9a-f-]+)\] received", proc.log())


@pytest.fixture
def order_steps_of_60s(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Orders submitted by this process get 60 s step windows (a step row keeps its window from
    submission): a 5 s call fits its window but not the broker's 3 s consumer_timeout, and a
    request delivered again outlives a worker's restart (a request expires, in RabbitMQ too,
    at its step's complete-by: Celery sends `expires` as the message's TTL)."""
    settings.SAS = {**settings.SAS, "ORDER_STEP_TIMEOUT": 60.0}
    workflow = build_order_workflow()
    monkeypatch.setitem(workflows._registry, workflow.name, workflow)


def test_late_acked_step_past_consumer_timeout__channel_closed_redelivered__one_charge(
    short_rabbit: PrivateRabbit,
    vhost: str,
    engine_paused: None,
    order_steps_of_60s: None,
    simulator_session: Proc,
    worker_env: dict[str, str],
    demo_user: Any,
    tmp_path: Path,
) -> None:
    # Every step through the broker (no step run in place): the charge's own message is held
    # unacked for its whole 5 s call, past the 3 s timeout.
    env = {
        **worker_env,
        "CELERY_BROKER_URL": short_rabbit.url(vhost),
        "SAS_ORDER_STEP_TIMEOUT": "60",
        "SAS_EAGER_STEPS": "0",
    }
    queues = "agent.inventory,agent.payment,agent.shipping"
    server_log = short_rabbit.log_path.stat().st_size
    with _engine_on(env, tmp_path, agents=False) as (_, sim):
        sim.set_faults("payment", latency_ms=5000)
        first = celery_worker(name="agents-1", queues=queues, log_dir=tmp_path, env=env)
        second = celery_worker(name="agents-2", queues=queues, log_dir=tmp_path, env=env)
        try:
            first.start(ready_marker=" ready.")
            order = submit_order(demo_user)
            wait_for(
                lambda: CLOSED in first.log(), timeout=40, what="the first worker's channel to be closed"
            )
            wait_for(lambda: not first.alive(), timeout=40, what="the first worker to exit")
            (charge_task,) = _received_ids(first, "agents.payment.charge")

            # A process manager starts a worker again; the delivery comes back to it.
            sim.set_faults("payment", latency_ms=0)
            second.start(ready_marker=" ready.")
            wait_run(order.run_id, (Run.State.COMPLETED,), timeout=60)
            wait_for(
                lambda: charge_task in _received_ids(second, "agents.payment.charge"),
                timeout=20,
                what="the charge request delivered again",
            )
            wait_for(
                lambda: (
                    f"agents.payment.charge[{charge_task}] succeeded" in second.log()
                    or f"agents.payment.charge[{charge_task}] raised" in second.log()
                ),
                timeout=20,
                what="the charge delivered again to end",
            )
            charges = sim.ledger(service="payment", operation="charge")
            calls = sim.stats()["services"]["payment"]["charge"]
        finally:
            for proc in (first, second):
                proc.stop()

    assert BROKER_TIMED_OUT in _server_log_from(short_rabbit, server_log)
    # One charge, under the step's idempotency key, although the request was delivered twice:
    # the second delivery was dropped unread (its start-by had passed) or, if read, its call was
    # answered from the payment service's idempotency store and its reply fenced off.
    charge = Step.objects.get(run_id=order.run_id, name="charge_payment")
    assert [c["key"] for c in charges] == [charge.idempotency_key], charges
    assert calls.get("applied") == 1 and set(calls) <= {"applied", "replayed"}, calls
    history = list(TaskExecutionHistory.objects.filter(step=charge).values_list("kind", "status"))
    assert ("attempt", "succeeded") in history, history


def test_heartbeat_step_past_consumer_timeout__acked_on_start__one_attempt_worker_lives(
    short_rabbit: PrivateRabbit,
    vhost: str,
    engine_paused: None,
    simulator_session: Proc,
    worker_env: dict[str, str],
    demo_user: Any,
    tmp_path: Path,
) -> None:
    # The export works 6 s (twice the timeout) on heartbeats every 0.5 s.
    env = {**worker_env, "CELERY_BROKER_URL": short_rabbit.url(vhost), "SAS_EXPORT_MIN_SECONDS": "6"}
    server_log = short_rabbit.log_path.stat().st_size
    with _engine_on(env, tmp_path, agents=False):
        worker = celery_worker(
            name="exports", queues="agent.exports", log_dir=tmp_path, env=env, concurrency=1
        )
        try:
            worker.start(ready_marker=" ready.")
            export = export_request(owner_id=demo_user.id)
            run = wait_run(export.run_id, (Run.State.COMPLETED,), timeout=40)
            alive = worker.alive()
        finally:
            worker.stop()

    (attempt,) = TaskExecutionHistory.objects.filter(run=run, kind="attempt")
    assert attempt.status == "succeeded"
    assert (attempt.ended_at - attempt.started_at).total_seconds() > TIMEOUT_MS / 1000 * 2
    assert HeartbeatStatus.objects.get(run=run).status == "completed"
    assert alive and CLOSED not in worker.log()
    assert BROKER_TIMED_OUT not in _server_log_from(short_rabbit, server_log)


def _kick_later(countdown: float) -> str:
    result = current_app.send_task("scheduler.kick", countdown=countdown, ignore_result=True)
    return str(result.id)


def test_countdown_past_consumer_timeout__classic_queue__worker_exits__kick_runs_once_on_the_next(
    short_rabbit: PrivateRabbit, vhost: str, engine_paused: None, worker_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**worker_env, "CELERY_BROKER_URL": short_rabbit.url(vhost)}
    server_log = short_rabbit.log_path.stat().st_size
    first = celery_worker(name="scheduler-1", queues="scheduler", log_dir=tmp_path, env=env)
    second = celery_worker(name="scheduler-2", queues="scheduler", log_dir=tmp_path, env=env)
    try:
        first.start(ready_marker=" ready.")
        with publishing_to(env["CELERY_BROKER_URL"]):
            kick = _kick_later(6)  # held by the worker, unacked, until its time
        wait_for(lambda: CLOSED in first.log(), timeout=30, what="the worker's channel to be closed")
        wait_for(lambda: not first.alive(), timeout=30, what="the worker to exit")
        second.start(ready_marker=" ready.")
        wait_for(
            lambda: f"scheduler.kick[{kick}] succeeded" in second.log(),
            timeout=30,
            what="the kick on the next worker",
        )
    finally:
        for proc in (first, second):
            proc.stop()
    assert kick in _received_ids(first, "scheduler.kick")  # held, never run
    assert f"scheduler.kick[{kick}] succeeded" not in first.log()
    assert second.log().count(f"scheduler.kick[{kick}] succeeded") == 1
    assert BROKER_TIMED_OUT in _server_log_from(short_rabbit, server_log)


def test_countdown_past_consumer_timeout__quorum_queues__waits_in_rabbitmq__worker_lives(
    short_rabbit: PrivateRabbit, vhost: str, engine_paused: None, worker_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**worker_env, "CELERY_BROKER_URL": short_rabbit.url(vhost), "SAS_BROKER_QUEUE_TYPE": "quorum"}
    server_log = short_rabbit.log_path.stat().st_size
    worker = celery_worker(name="scheduler-q", queues="scheduler", log_dir=tmp_path, env=env)
    try:
        worker.start(ready_marker=" ready.")
        with publishing_to(env["CELERY_BROKER_URL"], queue_type="quorum"):
            kick = _kick_later(6)
        wait_for(lambda: f"scheduler.kick[{kick}] succeeded" in worker.log(), timeout=30, what="the kick")
        alive = worker.alive()
    finally:
        worker.stop()
    log = worker.log()
    assert alive and CLOSED not in log
    assert log.count(f"scheduler.kick[{kick}] succeeded") == 1
    assert "native delayed delivery do not support direct exchanges" not in log
    assert BROKER_TIMED_OUT not in _server_log_from(short_rabbit, server_log)
    # The countdown waited in RabbitMQ's delay exchanges, not in the worker.
    exchanges = rabbitmqctl(
        "list_exchanges", "-p", vhost, "name", "--no-table-headers", "-q", node=short_rabbit.node
    )
    assert "celery_delayed_27" in exchanges

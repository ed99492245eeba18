"""Who is alive, read from the one low room (issue 27), with a real worker on each broker (Redis,
and RabbitMQ at 127.0.0.1:5672 in a vhost of the test's own; both on a Redis prefix of the test's
own, so the session's engines never meet it):

- the queue depth of a queue nobody consumes, through the one reader (liveness/queues.py);
- the worker's heartbeat for each queue it consumes (liveness/heartbeat.py), gone soon after it is
  killed with SIGKILL (no clean shutdown removes it);
- a watched periodic task's last run, recorded at its success by the worker that ran it
  (liveness/last_run.py), as the health page, /metrics and the dead man's switch read it.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery import Celery
from django.conf import settings
from kombu import Connection, Exchange, Queue

from liveness.heartbeat import consumers_alive
from liveness.last_run import last_run_age
from liveness.queues import queue_depths, queue_statuses
from sasproject.redis_client import get_redis
from sastools.harness import Proc, wait_for
from sastools.rabbit import amqp_url, session_vhost

pytestmark = pytest.mark.both_brokers

IDLE = "liveness.idle"
OWN = "liveness.own"


@pytest.fixture
def own_broker(broker: str, settings: Any) -> Iterator[dict[str, str]]:
    """This test's broker and Redis prefix, set in this process's settings too; the worker's env."""
    prefix = f"{settings.REDIS_PREFIX}liveness-{uuid.uuid4().hex[:8]}:"
    options = {**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "global_keyprefix": prefix}
    settings.REDIS_PREFIX = prefix
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = options
    settings.SAS_MONITORING = {**settings.SAS_MONITORING, "CONSUMER_STALE": 2.0}
    env = {"SAS_REDIS_PREFIX": prefix, "SAS_CONSUMER_HEARTBEAT": "0.3", "SAS_CONSUMER_STALE": "2"}
    with contextlib.ExitStack() as stack:
        if broker == "rabbitmq":
            vhost = stack.enter_context(session_vhost(f"sas-liveness-{os.getpid()}-{uuid.uuid4().hex[:8]}"))
            settings.CELERY_BROKER_URL = env["CELERY_BROKER_URL"] = amqp_url(vhost)
        try:
            yield env
        finally:
            client = get_redis()
            for key in client.scan_iter(f"{prefix}*", count=1000):
                client.delete(key)


def _publish_idle(count: int) -> None:
    """`count` messages into a queue nobody consumes (declared, as a producer would)."""
    queue = Queue(IDLE, Exchange(IDLE, type="direct"), routing_key=IDLE, auto_delete=False)
    with Connection(
        settings.CELERY_BROKER_URL,
        transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        connect_timeout=2,
    ) as conn:
        producer = conn.Producer()
        for i in range(count):
            producer.publish({"n": i}, exchange=queue.exchange, routing_key=IDLE, declare=[queue])


def _send_task(name: str, queue: str) -> None:
    """Publish a task as the engine's beat would, to this test's broker."""
    app = Celery("liveness-test", set_as_current=False)
    app.conf.update(
        broker_url=settings.CELERY_BROKER_URL,
        broker_transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        task_queues=settings.CELERY_TASK_QUEUES,
        task_serializer="json",
    )
    try:
        app.send_task(name, queue=queue)
    finally:
        app.close()


def test_liveness__worker_on_each_broker__depth_heartbeat_and_last_run_read__kill_ends_its_beat(
    own_broker: dict[str, str], start_worker: Callable[..., Proc]
) -> None:
    # Before any worker: nobody consumes, nothing ran; a queue with work has its depth.
    _publish_idle(3)
    depths = queue_depths(names=[IDLE, "liveness.never-declared"])
    assert {name: depth for name, (depth, _age) in depths.items()} == {IDLE: 3, "liveness.never-declared": 0}
    assert consumers_alive(queues=["supervisor", OWN, IDLE]) == {"supervisor": 0, OWN: 0, IDLE: 0}
    assert last_run_age(task="alerting.evaluate") is None

    worker = start_worker(
        name=f"liveness-{uuid.uuid4().hex[:6]}",
        queues=f"supervisor,{OWN}",
        concurrency=1,
        SAS_ALERTS_ENABLED="0",
        **own_broker,
    )
    wait_for(
        lambda: consumers_alive(queues=["supervisor", OWN, IDLE]) == {"supervisor": 1, OWN: 1, IDLE: 0},
        timeout=20,
        what="the worker's heartbeat for its queues",
    )
    statuses = {s.name: s for s in queue_statuses()}
    assert statuses["supervisor"].consumers == 1 and statuses["supervisor"].depth is not None
    assert queue_depths(names=[IDLE])[IDLE][0] == 3  # still nobody's

    # A watched periodic task run by that worker: its success is the one last-run record.
    _send_task("alerting.evaluate", "supervisor")
    age = wait_for(
        lambda: last_run_age(task="alerting.evaluate"), timeout=30, what="alerting.evaluate's last run"
    )
    assert 0 <= age < 30

    # Killed (no clean shutdown): its heartbeat stops and goes stale.
    worker.kill()
    wait_for(
        lambda: consumers_alive(queues=["supervisor", OWN]) == {"supervisor": 0, OWN: 0},
        timeout=15,
        what="the killed worker's heartbeat to go stale",
    )

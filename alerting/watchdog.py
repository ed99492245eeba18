"""A thread in every worker: it beats for the queues the worker consumes (alerting/liveness.py)
and - in the worker that consumes the supervisor queue - is the evaluator's second clock.

Why a thread and not beat alone (docs/decisions.md, "Alerting's dead man's switch"): the rules
that say "the supervisor has not run" must be evaluated when beat is the thing that died. Beat
sends `alerting.evaluate` every SAS_ALERTS_INTERVAL; the watchdog runs a tick itself whenever
the last completed tick is older than 3 intervals. Both take the same advisory lock, so they
never run a tick at once. If the control worker is dead too, its queue-heartbeats expire and
nobody evaluates: that is what an external check of `/healthz`-style liveness (or the metrics
issue's Prometheus rules) is for; it is named as the remaining gap in docs/operators.md.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from . import liveness
from .services import EVALUATE_TASK, alert_rules_evaluate

logger = logging.getLogger("sas.alerts")

EVALUATOR_QUEUE = "supervisor"


def _loop(*, queues: list[str], worker: str, stop: threading.Event) -> None:
    every = float(settings.SAS_ALERT_HEARTBEAT_INTERVAL)
    evaluates = EVALUATOR_QUEUE in queues
    while not stop.wait(every):
        try:
            liveness.consumers_beat(queues=queues, worker=worker, ttl=every * 3)
        except redis.RedisError:
            logger.warning("consumer heartbeat not written (Redis)")
        if not (evaluates and settings.SAS_ALERTS_ENABLED):
            continue
        try:
            age = liveness.last_run_age(task=EVALUATE_TASK)
            if age is None or age > 3 * float(settings.SAS["ALERTS_INTERVAL"]):
                close_old_connections()
                tick = alert_rules_evaluate()
                if tick.ran:
                    logger.info("watchdog evaluated the alert rules (beat's tick was %s s late)", age)
        except (DatabaseError, redis.RedisError):
            logger.exception("watchdog evaluation failed; trying again")
            connection.close()
        except Exception:
            # Anything else (a broker library's error, a bug) must not end the thread: it is the
            # evaluator's second clock, and a dead one pages nobody (issue 27).
            logger.exception("watchdog evaluation failed unexpectedly; trying again")
            connection.close()


_started: list[threading.Event] = []


def watchdog_start(sender: Any = None, **kwargs: Any) -> None:
    """`worker_ready` receiver: start the thread once per worker process."""
    if _started:
        return
    consumer = sender
    app = consumer.app
    queues = sorted(app.amqp.queues.consume_from or app.amqp.queues)
    worker = str(getattr(consumer, "hostname", "worker"))
    stop = threading.Event()
    _started.append(stop)
    with contextlib.suppress(redis.RedisError):
        liveness.consumers_beat(
            queues=queues, worker=worker, ttl=float(settings.SAS_ALERT_HEARTBEAT_INTERVAL) * 3
        )
    threading.Thread(
        target=_loop,
        kwargs={"queues": queues, "worker": worker, "stop": stop},
        name="sas-watchdog",
        daemon=True,
    ).start()


def watchdog_stop(sender: Any = None, **kwargs: Any) -> None:
    """`worker_shutdown`: stop beating (a stopped worker's queues show as unconsumed after TTL)."""
    for stop in _started:
        stop.set()


# Tasks whose completion the dead man's switch watches (the periodic rows' tasks).
def last_run_recorded(sender: Any = None, task: Any = None, state: str | None = None, **kwargs: Any) -> None:
    """`task_postrun`: a periodic task of the engine completed - record when (Redis)."""
    name = getattr(task, "name", "")
    if state == "SUCCESS" and name in settings.SAS_ALERT_WATCHED_TASKS:
        try:
            liveness.last_run_record(task=name)
        except redis.RedisError:
            logger.warning("last run of %s not recorded (Redis)", name)

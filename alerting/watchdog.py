"""A thread in the worker that consumes the supervisor queue: the evaluator's second clock. (It
also beat for the worker's queues until issue 27; the one worker heartbeat is the consumer's
bootstep, liveness/heartbeat.py, and the evaluator's last run is read from liveness/last_run.py.)

Why a thread and not beat alone (docs/decisions.md, "Alerting's dead man's switch"): the rules
that say "the supervisor has not run" must be evaluated when beat is the thing that died. Beat
sends `alerting.evaluate` every SAS_ALERTS_INTERVAL; the watchdog runs a tick itself whenever
the last completed tick is older than 3 intervals. Both take the same advisory lock, so they
never run a tick at once. If the control worker is dead too, its queue-heartbeats expire and
nobody evaluates: that is what an external check of `/healthz`-style liveness (or the metrics
issue's Prometheus rules) is for; it is named as the remaining gap in docs/operating/operators.md.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections

from liveness.last_run import last_run_age

from .services import EVALUATE_TASK, alert_rules_evaluate

logger = logging.getLogger("sas.alerts")

EVALUATOR_QUEUE = "supervisor"


def _loop(*, stop: threading.Event) -> None:
    every = float(settings.SAS_ALERT_HEARTBEAT_INTERVAL)
    while not stop.wait(every):
        if not settings.SAS_ALERTS_ENABLED:
            continue
        try:
            age = last_run_age(task=EVALUATE_TASK)
            if age is None or age > 3 * float(settings.SAS["ALERTS_INTERVAL"]):
                close_old_connections()
                tick = alert_rules_evaluate()
                if tick.ran:
                    logger.info("watchdog evaluated the alert rules (beat's tick was %s s late)", age)
        except (DatabaseError, redis.RedisError):
            logger.exception("watchdog evaluation failed; trying again")
            connections.close_all()  # the default and, behind a pooler, the direct one
        except Exception:
            # Anything else (a broker library's error, a bug) must not end the thread: it is the
            # evaluator's second clock, and a dead one pages nobody (issue 27).
            logger.exception("watchdog evaluation failed unexpectedly; trying again")
            connections.close_all()


_started: list[threading.Event] = []


def watchdog_start(sender: Any = None, **kwargs: Any) -> None:
    """`worker_ready` receiver: start the thread once per worker process that consumes the
    supervisor queue (the evaluator's)."""
    if _started:
        return
    app = sender.app
    queues = sorted(app.amqp.queues.consume_from or app.amqp.queues)
    if EVALUATOR_QUEUE not in queues:
        return
    stop = threading.Event()
    _started.append(stop)
    threading.Thread(target=_loop, kwargs={"stop": stop}, name="sas-watchdog", daemon=True).start()


def watchdog_stop(sender: Any = None, **kwargs: Any) -> None:
    """`worker_shutdown`: stop the thread."""
    for stop in _started:
        stop.set()

"""What differs on RabbitMQ (issue 22): every message Celery holds unacknowledged - a late-acked
task while it runs, an ETA/countdown task while the worker waits for its time - must be acked
before RabbitMQ's consumer_timeout, or the broker closes the channel and delivers it again."""

from __future__ import annotations

import re

from django.conf import settings

from ..rabbit import rabbitmqctl


def _longest_holds() -> dict[str, float]:
    """Every bound on how long a worker holds one delivery unacked, by setting name."""
    holds: dict[str, float] = {
        "CELERY_TASK_TIME_LIMIT": float(settings.CELERY_TASK_TIME_LIMIT),
        "SAS.JOBS_DISPATCH_INTERVAL": float(settings.SAS["JOBS_DISPATCH_INTERVAL"]),
    }
    for name in ("ORDER_BACKOFF_MAX", "ORDER_COMPENSATION_BACKOFF_MAX"):
        holds[f"SAS.{name}"] = float(settings.SAS[name])
    holds["SAS_HTTP_JOBS.BACKOFF_MAX"] = float(settings.SAS_HTTP_JOBS["BACKOFF_MAX"])
    holds["SAS_WEBHOOKS.BACKOFF_MAX"] = float(settings.SAS_WEBHOOKS["BACKOFF_MAX"])
    return holds


def test_every_unacked_hold__time_limit_and_countdowns__below_the_consumer_timeout() -> None:
    timeout = float(settings.SAS_BROKER_CONSUMER_TIMEOUT)
    holds = _longest_holds()
    assert holds and all(v > 0 for v in holds.values())
    too_long = {name: v for name, v in holds.items() if v >= timeout}
    assert not too_long, f"held unacked past consumer_timeout {timeout}s: {too_long}"


def test_machine_rabbitmq__consumer_timeout_not_below_the_setting() -> None:
    # The machine's (and CI's) broker: the setting must not promise more than the broker gives.
    out = rabbitmqctl("eval", "application:get_env(rabbit, consumer_timeout).")
    match = re.search(r"\{ok,(\d+)\}", out)
    broker_seconds = int(match.group(1)) / 1000 if match else float("inf")  # undefined: no timeout
    assert broker_seconds >= float(settings.SAS_BROKER_CONSUMER_TIMEOUT)

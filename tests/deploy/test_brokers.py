"""What differs on RabbitMQ (issue 22): every message Celery holds unacknowledged - a late-acked
task while it runs, an ETA/countdown task while the worker waits for its time - must be acked
before RabbitMQ's consumer_timeout, or the broker closes the channel and delivers it again."""

from __future__ import annotations

import re
from collections.abc import Iterator

from celery import current_app
from django.conf import settings

from sastools.rabbit import rabbitmqctl
from scheduler.workflows import StepDef, get_workflow, registered_workflows

# The hard time limit of an attempt is its window + 2 s (scheduler/services/dispatch.py).
HARD_LIMIT_MARGIN = 2.0


def _every_step() -> Iterator[tuple[str, StepDef]]:
    for name in registered_workflows():
        for step in get_workflow(name).steps:
            yield f"{name}.{step.name}", step
            if step.compensation is not None:
                yield f"{name}.{step.compensation.name}", step.compensation


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
    # Every registered workflow's steps: an attempt's message is held for up to its hard time
    # limit (its window + 2 s; a step run in place counts against the first step's limit,
    # agents/eager.py), and a retry's kick waits up to its backoff_max. A heartbeat step is
    # acked when it starts (agents/long.py): its window moves, its hold does not count.
    for label, step in _every_step():
        if step.heartbeat is None:
            holds[f"{label}.timeout"] = step.timeout + HARD_LIMIT_MARGIN
        holds[f"{label}.backoff_max"] = step.backoff_max
    return holds


def test_every_unacked_hold__time_limit_and_countdowns__below_the_consumer_timeout() -> None:
    timeout = float(settings.SAS_BROKER_CONSUMER_TIMEOUT)
    holds = _longest_holds()
    # A test's own workflow (registered by another test in the same process) may retry with no
    # backoff: a hold of 0 is no hold. The platform's own bounds must be set.
    assert holds and all(v >= 0 for v in holds.values())
    assert holds["CELERY_TASK_TIME_LIMIT"] > 0 and holds["SAS.JOBS_DISPATCH_INTERVAL"] > 0
    too_long = {name: v for name, v in holds.items() if v >= timeout}
    assert not too_long, f"held unacked past consumer_timeout {timeout}s: {too_long}"


def test_machine_rabbitmq__consumer_timeout_not_below_the_setting() -> None:
    # The machine's (and CI's) broker: the setting must not promise more than the broker gives.
    out = rabbitmqctl("eval", "application:get_env(rabbit, consumer_timeout).")
    match = re.search(r"\{ok,(\d+)\}", out)
    broker_seconds = int(match.group(1)) / 1000 if match else float("inf")  # undefined: no timeout
    assert broker_seconds >= float(settings.SAS_BROKER_CONSUMER_TIMEOUT)


def test_heartbeat_steps__acked_when_started__never_held_for_their_deadline() -> None:
    current_app.loader.import_default_modules()  # every app's tasks, as a worker loads them
    # Workflows the test session registers (tests/engine_workflow.py) may name agent tasks that
    # only their own test modules define: the app's tasks are what a worker runs.
    heartbeat_ops = {
        step.operation
        for _, step in _every_step()
        if step.heartbeat is not None and step.operation in current_app.tasks
    }
    assert heartbeat_ops, "no heartbeat step registered: the export's should be"
    for operation in sorted(heartbeat_ops):
        assert current_app.tasks[operation].acks_late is False, operation
    # ...and every other agent acks late (a killed worker's request is delivered again).
    others = {step.operation for _, step in _every_step() if step.heartbeat is None}
    late = {op: current_app.tasks[op].acks_late for op in others if op in current_app.tasks}
    assert late and all(late.values()), late

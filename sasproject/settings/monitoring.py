"""Monitoring (issue 19): the queues every process declares, /healthz, /readyz, /metrics,
Flower and the engine-health page."""

from __future__ import annotations

import os
from typing import Any

from sasproject.settings.base import SAS_WORKFLOW_APPS
from sasproject.settings.celery_conf import CELERY_TASK_DEFAULT_QUEUE_TYPE
from sasproject.settings.env import env_bool, env_float
from sasproject.workflow_apps import workflow_app_queue

# --------------------------------------------------------------------------------------------
# Monitoring (issue 19): /healthz, /readyz, /metrics (ops/), Flower, the engine-health page.
# See docs/operating/operators.md ("Monitoring") and docs/decisions.md ("Metrics read at scrape time").
# --------------------------------------------------------------------------------------------
# Every queue the engine's tasks are routed to (CELERY_TASK_ROUTES, agents/routing.py), declared
# explicitly so that /metrics, the health page and Flower's broker page list each of them even
# before a worker has consumed it (Flower falls back to task_queues when it knows no workers).
# tests/ops/test_queues.py checks that every registered task's queue is here. Each Queue is the
# one Celery would create for a missing name (an exchange of the queue's name, direct, routing
# key = name), so routing and existing deployments are unchanged. (A worker started without -Q
# would now consume every queue listed here rather than only "default"; every worker of the
# Procfile, the compose file, the tests and the benches names its queues.)
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-queues
SAS_QUEUES = [
    "scheduler",
    "supervisor",
    "default",
    "jobs",
    "agent.inventory",
    "agent.payment",
    "agent.shipping",
    "agent.webhook",
    "agent.http",
    "agent.tasks",
    "agent.catalogue",
    "agent.exports",
    # The storage maintenance (issue 29), on the longjobs worker.
    "storage",
    "bench",
    # The workflow apps' queues, one each (settings/base.py's SAS_WORKFLOW_APPS; issue 31).
    *(workflow_app_queue(app) for app in SAS_WORKFLOW_APPS),
]


def _celery_queues() -> list[Any]:
    from kombu import Exchange, Queue

    # Quorum queues (SAS_BROKER_QUEUE_TYPE above, RabbitMQ only) are declared with their type,
    # behind topic exchanges: Celery's native delayed delivery (a countdown waits in RabbitMQ's
    # celery_delayed_* exchanges, not unacked in a worker) binds only topic exchanges - on a
    # direct one kombu warns "ETA tasks published to this exchange will block the worker".
    # Routing is unchanged: each queue's key is its own name. (Classic queues keep their direct
    # exchanges: RabbitMQ refuses to redeclare an existing exchange with another type.)
    # https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/rabbitmq.html#native-delayed-delivery
    quorum = CELERY_TASK_DEFAULT_QUEUE_TYPE == "quorum"
    arguments = {"x-queue-type": "quorum"} if quorum else None
    kind = "topic" if quorum else "direct"
    return [
        Queue(name, Exchange(name, type=kind), routing_key=name, queue_arguments=arguments)
        for name in SAS_QUEUES
    ]


CELERY_TASK_QUEUES = _celery_queues()

SAS_MONITORING: dict[str, Any] = {
    # The engine's own counters and histograms (step attempts by outcome, step latency and
    # schedule-to-start, supervisor recoveries), written to Redis by the process where they
    # happen - one pipelined round trip per attempt - and read by /metrics. 0 turns the writes
    # off (bench/engine.py measures the cost with them on and off).
    "METRICS": env_bool("SAS_METRICS", True),
    # /metrics answers only with one of these credentials: `Authorization: Bearer <token>`, or
    # HTTP basic auth as "user:password". Neither set: /metrics refuses every request (401).
    "METRICS_TOKEN": os.environ.get("SAS_METRICS_TOKEN", ""),
    "METRICS_BASIC_AUTH": os.environ.get("SAS_METRICS_BASIC_AUTH", ""),
    # Each worker writes "alive, consuming these queues" into Redis every CONSUMER_HEARTBEAT
    # seconds (liveness/heartbeat.py); a consumer not heard from for CONSUMER_STALE
    # seconds counts as gone (a frozen or killed worker). The health page and /metrics read them.
    "CONSUMER_HEARTBEAT": env_float("SAS_CONSUMER_HEARTBEAT", 5.0),
    "CONSUMER_STALE": env_float("SAS_CONSUMER_STALE", 15.0),
    # Flower's address for the admin's link (empty: no link).
    "FLOWER_URL": os.environ.get(
        "SAS_FLOWER_URL", "http://127.0.0.1:" + os.environ.get("FLOWER_PORT", "5555")
    ),
}

"""Celery and beat: the broker, serialization, acknowledgement, time limits, routes and the
beat scheduler. Every non-default setting says why."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from sasproject.settings.env import env_bool, env_float

# --------------------------------------------------------------------------------------------
# Celery. Every non-default setting says why. Reference:
# https://docs.celeryq.dev/en/stable/userguide/configuration.html
# --------------------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# Redis by default; RabbitMQ (amqp://...) works as well: docs/deploying/deploy.md, "Broker". Empty counts
# as unset (docker/production.env.example lists it empty).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL
# No result backend: agents reply through the state store, never through AsyncResult, and
# storing results would only fill Redis. (task_ignore_result below.)
# (bench/ sets CELERY_RESULT_BACKEND to time the bare Celery round trip with AsyncResult.get().)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_IGNORE_RESULT = True

# JSON only: tasks carry ids, leases and plain payloads; pickle would let a broker write run
# code. https://docs.celeryq.dev/en/stable/userguide/security.html#serializers
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True

# Ack after the task ran, not when it was received, so a worker that dies mid-task leaves the
# message to be delivered again. https://docs.celeryq.dev/en/stable/faq.html#faq-acks-late-vs-retry
CELERY_TASK_ACKS_LATE = True
# ...and when the pool child is killed (-9, OOM) the parent rejects+requeues instead of acking.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-reject-on-worker-lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One message in hand per process: with late acks a prefetched message waits behind a slow call
# and can run past its step deadline. https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A lost broker connection cancels running late-ack tasks rather than letting them ack on a
# new connection that never delivered them (Celery 5.1+ recommended setting).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Never give up reconnecting to the broker. The default (100 retries, 2 s apart growing to 30 s)
# makes a worker exit with status 1 after ~47 minutes without Redis - the control worker is the
# supervisor, which must outlive a broker outage (tests/e2e/test_outage_live.py). None means
# retry forever (0 would mean "do not retry"): kombu.utils.functional.retry_over_time.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#broker-connection-max-retries
CELERY_BROKER_CONNECTION_MAX_RETRIES = None

# Time limits nest: an agent's per-call soft/hard limits are set at dispatch from the step's
# complete-by window (always below it); these global limits are the ceiling for any task, and the
# broker's visibility timeout sits above them all so Redis never redelivers a task that is still
# legitimately running. https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
CELERY_TASK_SOFT_TIME_LIMIT = int(os.environ.get("CELERY_TASK_SOFT_TIME_LIMIT", "240"))
CELERY_TASK_TIME_LIMIT = int(os.environ.get("CELERY_TASK_TIME_LIMIT", "300"))
# An optional key prefix isolates several deployments (or test sessions) on one Redis.
# https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html
REDIS_PREFIX = os.environ.get("SAS_REDIS_PREFIX", "")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "3600")),
}
if REDIS_PREFIX:
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = REDIS_PREFIX
# RabbitMQ's consumer_timeout (seconds; its default is 30 min): a delivery a consumer holds
# unacked longer closes the channel and is delivered again. With task_acks_late a message stays
# unacked for as long as its task runs, and an ETA/countdown message for as long as the worker
# waits for its time (Celery holds both unacked); Celery's worker exits when it fires. Ours stay
# far below it: the task time limit above (300 s), every step's window + 2 s (its hard limit),
# heartbeat steps acked when they start (agents/long.py), and the countdowns (kicks after a
# backoff, at most the *_BACKOFF_MAX settings; dispatcher wake-ups, under JOBS_DISPATCH_INTERVAL)
# - tests/deploy/test_brokers.py checks every one against this value and the machine's broker
# against it; tests/e2e/test_consumer_timeout_live.py fires it. Set it to your broker's
# consumer_timeout if you lowered it; never raise time limits or backoffs above it.
# https://www.rabbitmq.com/docs/consumers#acknowledgement-timeout
SAS_BROKER_CONSUMER_TIMEOUT = env_float("SAS_BROKER_CONSUMER_TIMEOUT", 1800.0)
# RabbitMQ only: "quorum" declares every queue a quorum queue (replicated over a RabbitMQ
# cluster, survives the loss of a minority of nodes) instead of a classic one. Quorum queues
# have no global QoS (Celery detects them and uses per-consumer prefetch:
# worker_detect_quorum_queues, on by default) and no x-max-priority (our priorities are applied
# when PostgreSQL hands out steps, not by the broker); countdowns then use RabbitMQ's native
# delayed delivery (Celery 5.5+), and publishes wait for the broker's confirm. Redis ignores it.
# https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/rabbitmq.html#using-quorum-queues
SAS_BROKER_QUEUE_TYPE = os.environ.get("SAS_BROKER_QUEUE_TYPE", "classic").strip() or "classic"
if SAS_BROKER_QUEUE_TYPE not in ("classic", "quorum"):
    raise ImproperlyConfigured(f"SAS_BROKER_QUEUE_TYPE is classic or quorum, not {SAS_BROKER_QUEUE_TYPE!r}")
CELERY_TASK_DEFAULT_QUEUE_TYPE = "classic"
if SAS_BROKER_QUEUE_TYPE == "quorum" and CELERY_BROKER_URL.startswith(("amqp", "pyamqp")):
    CELERY_TASK_DEFAULT_QUEUE_TYPE = "quorum"
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = "quorum"
    CELERY_WORKER_DETECT_QUORUM_QUEUES = True
    CELERY_BROKER_TRANSPORT_OPTIONS["confirm_publish"] = True

# Explicit queues: one for the scheduler, one for the supervisor, one per remote service (so a
# slow payment provider cannot starve inventory calls). Routing is by task name prefix.
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = (
    # Agent operations `agents.<service>.<op>` go to queue `agent.<service>` (agents/routing.py).
    "agents.routing.route_agent_task",
    {
        # The jobs dispatcher has a worker of its own (Procfile `dispatcher`): a burst's tick
        # may write for seconds, and must not hold up the scheduler's kicks or the sweep.
        "scheduler.jobs_dispatch": {"queue": "jobs"},
        "scheduler.*": {"queue": "scheduler"},
        "supervisor.*": {"queue": "supervisor"},
        # The alert evaluator beside the supervisor; alert e-mails on the webhook agent's
        # worker (I/O threads), so a hanging SMTP server never holds up the control worker.
        "alerting.evaluate": {"queue": "supervisor"},
        "alerting.email_send": {"queue": "agent.webhook"},
        "bench.*": {"queue": "bench"},
        # Partitions, archives, drops and purges (issue 29): minutes at a time, on the longjobs
        # worker, never the control worker's queues.
        "ops.storage_maintain": {"queue": "storage"},
    },
)
# Celery 5.6+ closes every database connection before and after each task (celery/celery#9824
# reverted honouring CONN_MAX_AGE): a new PostgreSQL connection, and a server backend fork, per
# step - the largest single cost of a step in the profile in bench/README.md. With DB_REUSE_MAX
# the fixup force-closes them only every N tasks; between tasks sasproject/celery.py applies
# Django's own rules instead (close_old_connections: CONN_MAX_AGE, CONN_HEALTH_CHECKS), exactly
# as Django does around a request. https://docs.djangoproject.com/en/5.2/ref/databases/#persistent-connections
CELERY_DB_REUSE_MAX = int(os.environ.get("CELERY_DB_REUSE_MAX", "1000"))
# Task events cost several broker publishes per task (received, started, succeeded - and
# "sent" from the producer), which is a quarter of a short step's broker traffic. They are off
# by default and Flower turns them on for as long as it watches: it broadcasts enable_events to
# the workers every few seconds (its --enable_events option, default on), so `make run` and the
# compose file, which start Flower, show live tasks. Set both to 1 to have them always on.
# https://docs.celeryq.dev/en/stable/userguide/monitoring.html#events
# https://flower.readthedocs.io/en/latest/config.html#enable-events
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_WORKER_SEND_TASK_EVENTS", False)
CELERY_TASK_SEND_SENT_EVENT = env_bool("CELERY_TASK_SEND_SENT_EVENT", False)

# django-celery-beat keeps the schedule in the database so operators edit intervals in the admin.
# https://django-celery-beat.readthedocs.io/en/latest/#usage
# Its DatabaseScheduler, subclassed so that beat (and with it the supervisor's sweep) survives a
# database outage longer than its 5-minute full re-read; see sasproject/beat.py.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#beat-scheduler
CELERY_BEAT_SCHEDULER = "sasproject.beat:OutageTolerantDatabaseScheduler"
# How often beat re-reads the schedule; bounds how late a 1-second sweep can start.
CELERY_BEAT_MAX_LOOP_INTERVAL = 1

"""The domains' blocks of the SAS dict: the order workflow's step policy, and the long steps of
the catalogue reprice and the history export (issue 9)."""

from __future__ import annotations

import os

from sasproject.settings.engine import SAS
from sasproject.settings.env import env_float

# The order workflow's step policy (seconds / attempts). Short windows in tests come from here.
SAS["ORDER_STEP_TIMEOUT"] = env_float("SAS_ORDER_STEP_TIMEOUT", 10.0)
SAS["ORDER_MAX_FAILURES"] = int(os.environ.get("SAS_ORDER_MAX_FAILURES", "3"))
SAS["ORDER_BACKOFF_BASE"] = env_float("SAS_ORDER_BACKOFF_BASE", 0.5)
SAS["ORDER_BACKOFF_MAX"] = env_float("SAS_ORDER_BACKOFF_MAX", 10.0)
# How long a dispatched step may wait for an agent to start it (workers down, busy, restarting)
# before it is sent again - no failure counted (Temporal's schedule-to-start).
SAS["ORDER_QUEUE_TIMEOUT"] = env_float("SAS_ORDER_QUEUE_TIMEOUT", 10.0)
# The whole step's deadline (Temporal's schedule-to-close): minutes, so an outage of a service
# is waited out; past it the order is compensated. Attempts that reached the service and failed
# are bounded by ORDER_MAX_FAILURES; deferrals (breaker open) and requeues are not.
SAS["ORDER_STEP_DEADLINE"] = env_float("SAS_ORDER_STEP_DEADLINE", 300.0)
# Compensations never give up on their own: they retry with backoff capped here and alert an
# operator after ORDER_COMPENSATION_ALERT_AFTER failures.
SAS["ORDER_COMPENSATION_BACKOFF_MAX"] = env_float("SAS_ORDER_COMPENSATION_BACKOFF_MAX", 30.0)
SAS["ORDER_COMPENSATION_ALERT_AFTER"] = int(os.environ.get("SAS_ORDER_COMPENSATION_ALERT_AFTER", "6"))

# Long steps (issue 9). The catalogue reprice is paginated: rows per page, one page's window
# (an attempt each), how long a page may wait for an agent; the demo paces each page (seconds,
# inside its transaction) so a person can watch the bar move - 0 for full speed.
SAS["CATALOGUE_PAGE_SIZE"] = int(os.environ.get("SAS_CATALOGUE_PAGE_SIZE", "1000"))
SAS["CATALOGUE_PAGE_TIMEOUT"] = env_float("SAS_CATALOGUE_PAGE_TIMEOUT", 10.0)
SAS["CATALOGUE_QUEUE_TIMEOUT"] = env_float("SAS_CATALOGUE_QUEUE_TIMEOUT", 10.0)
SAS["CATALOGUE_PAGE_DELAY"] = env_float("SAS_CATALOGUE_PAGE_DELAY", 0.2)
# The history export heartbeats: each heartbeat extends its deadline by EXPORT_HEARTBEAT seconds
# (its agent beats every third of that); the whole export may take up to EXPORT_DEADLINE. The
# demo paces an export to take at least EXPORT_MIN_SECONDS (a minute), like a real long job.
SAS["EXPORT_HEARTBEAT"] = env_float("SAS_EXPORT_HEARTBEAT", 10.0)
SAS["EXPORT_QUEUE_TIMEOUT"] = env_float("SAS_EXPORT_QUEUE_TIMEOUT", 10.0)
SAS["EXPORT_DEADLINE"] = env_float("SAS_EXPORT_DEADLINE", 900.0)
SAS["EXPORT_MIN_SECONDS"] = env_float("SAS_EXPORT_MIN_SECONDS", 60.0)

# Django's task framework (issue 31 item 4; docs/developing/django-tasks.md): `@task` functions
# enqueued through it run as one-step runs of the engine (tasksbackend/). AGENT_QUEUES maps each
# of the framework's queue names to the agent queue whose worker runs them (`agent.tasks`: the
# Procfile's agents-tasks worker, which runs the `@schedulable` tasks too); a queue name not
# mapped is refused at enqueue. https://docs.djangoproject.com/en/6.0/topics/tasks/#configuring-a-task-backend
TASKS = {
    "default": {
        "BACKEND": "tasksbackend.backend.EngineBackend",
        "OPTIONS": {"AGENT_QUEUES": {"default": "agent.tasks"}},
    }
}

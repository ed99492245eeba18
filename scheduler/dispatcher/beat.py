"""The jobs dispatcher's django-celery-beat row (created with the engine's others by
`supervisor/periodic.py`): the tick task, its queue and the setting holding its interval."""

from __future__ import annotations

# (row name, task name, queue, setting holding the interval). Its own queue and worker (Procfile
# `dispatcher`), so a long tick never delays a sweep; more dispatchers scale it out (shards).
DISPATCHER_PERIODIC_TASK = (
    "sas: jobs dispatcher",
    "scheduler.jobs_dispatch",
    "jobs",
    "JOBS_DISPATCH_INTERVAL",
)

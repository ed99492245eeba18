"""The engine's django-celery-beat rows: the supervisor sweep, the scheduler safety tick and the
jobs dispatcher.

Shared by the data migration (with historical models) and `manage.py setup_periodic_tasks`, so
both create the same rows. Existing rows are left as an operator edited them unless `reset`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scheduler.dispatcher.beat import DISPATCHER_PERIODIC_TASK

PERIODIC_TASKS = (
    # (row name, task name, queue, setting holding the interval)
    ("sas: supervisor sweep", "supervisor.sweep", "supervisor", "SUPERVISOR_INTERVAL"),
    ("sas: scheduler safety tick", "scheduler.tick", "scheduler", "SCHEDULER_TICK_INTERVAL"),
    # Seed 004's Scheduler Service: fires due job occurrences (scheduler/jobs.md); its row is
    # defined in the dispatcher's room.
    DISPATCHER_PERIODIC_TASK,
    # The alert rules' evaluator (issue 21; alerting/services.py). The control worker's watchdog
    # also runs it when beat's ticks stop (the dead man's switch; docs/decisions.md).
    ("sas: alert rules", "alerting.evaluate", "supervisor", "ALERTS_INTERVAL"),
)


def periodic_tasks_ensure(
    *, interval_model: Any, task_model: Any, intervals: Mapping[str, Any], reset: bool = False
) -> list[str]:
    """Create (or with `reset`, restore) the engine's periodic tasks. Returns the names touched.

    Each run of a periodic task expires after a few intervals: if no worker is free, beat's
    backlog of sweeps is dropped instead of piling up (the next one does the same work).
    """
    touched: list[str] = []
    for row_name, task, queue, setting in PERIODIC_TASKS:
        every = max(1, round(intervals[setting]))
        schedule, _ = interval_model.objects.get_or_create(every=every, period="seconds")
        defaults = {
            "task": task,
            "interval": schedule,
            "queue": queue,
            "expire_seconds": max(5, every * 5),
            "enabled": True,
            "kwargs": json.dumps({}),
            "description": "Created by sasproject; the interval can be edited here.",
        }
        obj, created = task_model.objects.get_or_create(name=row_name, defaults=defaults)
        if created or reset:
            for key, value in defaults.items():
                setattr(obj, key, value)
            obj.save()
            touched.append(row_name)
    return touched

"""The engine's django-celery-beat rows: the supervisor sweep, the scheduler safety tick and the
jobs dispatcher - and the one function that creates every shipped row.

`periodic_tasks_ensure` is shared by the data migrations (with historical models) and
`manage.py setup_periodic_tasks`, so both create the same rows. Existing rows are left as an
operator edited them unless `reset`. Each app ships its own rows in its own `periodic.py`
(`PERIODIC_TASKS`; alerting's evaluator: alerting/periodic.py) and creates them by its own
migration; `periodic_tasks_shipped` gathers every installed app's, so the command (and the
tests' re-creation after a flush) makes them all without this app importing the ones above it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import import_module
from importlib.util import find_spec
from typing import Any

from django.apps import apps

from scheduler.dispatcher.beat import DISPATCHER_PERIODIC_TASK

PERIODIC_TASKS = (
    # (row name, task name, queue, setting holding the interval)
    ("sas: supervisor sweep", "supervisor.sweep", "supervisor", "SUPERVISOR_INTERVAL"),
    ("sas: scheduler safety tick", "scheduler.tick", "scheduler", "SCHEDULER_TICK_INTERVAL"),
    # Seed 004's Scheduler Service: fires due job occurrences (scheduler/jobs.md); its row is
    # defined in the dispatcher's room.
    DISPATCHER_PERIODIC_TASK,
)

PeriodicRow = tuple[str, str, str, str]


@cache
def periodic_tasks_shipped() -> tuple[PeriodicRow, ...]:
    """Every shipped row: each installed app's `<app>.periodic.PERIODIC_TASKS`, in the order of
    INSTALLED_APPS (this module's, the engine's, among them). Read once per process."""
    rows: list[PeriodicRow] = []
    for config in apps.get_app_configs():
        if find_spec(f"{config.name}.periodic") is None:
            continue
        rows.extend(getattr(import_module(f"{config.name}.periodic"), "PERIODIC_TASKS", ()))
    return tuple(rows)


def periodic_tasks_ensure(
    *,
    interval_model: Any,
    task_model: Any,
    intervals: Mapping[str, Any],
    rows: Sequence[PeriodicRow] | None = None,
    reset: bool = False,
) -> list[str]:
    """Create (or with `reset`, restore) the periodic tasks `rows` (None: every shipped one,
    `periodic_tasks_shipped`). Returns the names touched.

    Each run of a periodic task expires after a few intervals: if no worker is free, beat's
    backlog of sweeps is dropped instead of piling up (the next one does the same work).
    """
    touched: list[str] = []
    for row_name, task, queue, setting in periodic_tasks_shipped() if rows is None else rows:
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

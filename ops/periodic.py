"""The operator room's django-celery-beat row: the storage maintenance (issue 29; ops/tasks.py),
every SAS_STORAGE_INTERVAL, on queue storage (the longjobs worker). Created by ops' own
migration through the engine's `periodic_tasks_ensure` (supervisor/periodic.py)."""

from __future__ import annotations

STORAGE_PERIODIC_TASK = ("sas: storage maintenance", "ops.storage_maintain", "storage", "STORAGE_INTERVAL")

PERIODIC_TASKS = (STORAGE_PERIODIC_TASK,)

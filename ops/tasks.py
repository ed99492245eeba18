"""The operator room's periodic task: the storage maintenance (issue 29). Thin: it calls
ops/storage/retention.py."""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from django.db import DatabaseError

from .storage.retention import storage_maintain

logger = logging.getLogger("sas.storage")


# Hourly and minutes long at most: a run that finds the last one's work done does nothing. Its
# time limit stays under the row's expiry (5 intervals) so two never pile up behind each other.
@shared_task(name="ops.storage_maintain", ignore_result=True, send_events=False, soft_time_limit=3000)
def storage_maintain_task() -> dict[str, Any]:
    """Make partitions ahead, archive and drop the expired, purge a bounded round of old runs.
    Survives a database error: logs and returns, the next tick tries again."""
    try:
        done = storage_maintain()
    except DatabaseError:
        logger.exception("storage maintenance failed; next tick retries")
        return {"ran": False}
    return {"ran": True, "made": done.made, "dropped": done.dropped, "runs_purged": done.runs_purged}

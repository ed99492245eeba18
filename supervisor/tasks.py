"""The supervisor's periodic task, run by django-celery-beat (interval editable in the admin)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, OperationalError

from liveness.counters import supervisor_recoveries_add
from scheduler.services import holds_reconcile, runs_skip_unstarted, scheduler_instance_id

from .services import step_expire_sweep

logger = logging.getLogger(__name__)


# send_events=False: a sweep a second would bury the agents' tasks in Flower (issue 19). Its
# health signal is its last success as liveness records it (liveness/last_run.py: the
# engine-health page, /metrics' sas_periodic_task_last_run_timestamp_seconds, the SasSweepStale
# alert and the dead man's switch).
@shared_task(name="supervisor.sweep", ignore_result=True, send_events=False)
def supervisor_sweep() -> dict[str, int]:
    """Sweep expired Processing steps, then skip job occurrences not started within their
    schedule-to-start. Survives a database outage: logs and returns, the next
    beat tick tries again (a sweep that ran half-way committed its finished batches)."""
    try:
        result = step_expire_sweep(
            batch=settings.SAS["SWEEP_BATCH"], instance=f"supervisor@{scheduler_instance_id()}"
        )
        # Schedule-to-start: job occurrences whose first step waited too long are skipped
        # (one bounded batch per tick; the next tick takes the rest).
        skipped = runs_skip_unstarted(batch=settings.SAS["SWEEP_BATCH"])
        # Pauses and concurrency keys (issue 30): what a pause missed held, free slots given.
        holds_reconcile(batch=settings.SAS["SWEEP_BATCH"])
    except (DatabaseError, OperationalError):
        logger.exception("supervisor sweep failed; next tick retries")
        return {"examined": 0, "retried": 0, "errored": 0, "skipped": 0}
    supervisor_recoveries_add(
        {"retried": result.retried, "errored": result.errored, "requeued": result.requeued}
    )
    return {
        "examined": result.examined,
        "retried": result.retried,
        "errored": result.errored,
        "skipped": len(skipped.runs),
    }

"""The jobs dispatcher's Celery task: a thin wrapper over `tick.jobs_dispatch` (the beat row that
sends it: `beat.py`)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import DatabaseError

from scheduler.services.dispatch import scheduler_instance_id

from . import tick

logger = logging.getLogger(__name__)


@shared_task(name="scheduler.jobs_dispatch", ignore_result=True, send_events=False)
def jobs_dispatch_task() -> int:
    """The jobs dispatcher's tick (django-celery-beat, every SAS["JOBS_DISPATCH_INTERVAL"] s):
    settle ended job runs, fire due occurrences; then, when the next row is due before beat's next
    tick, wake for it (`jobs_dispatch_wake`), and while a job with dependents has a run not
    settled, tick again soon (`jobs_dispatch_follow`). Safe to run in several workers at once."""
    try:
        done = tick.jobs_dispatch(instance=scheduler_instance_id(), relay=tick.jobs_dispatch_relay)
        tick.jobs_dispatch_wake()
        tick.jobs_dispatch_follow()
    except DatabaseError:
        logger.exception("jobs dispatch failed; the next tick retries")
        return 0
    return done.started

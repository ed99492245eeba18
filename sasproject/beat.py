"""celery beat's scheduler: django-celery-beat's DatabaseScheduler, kept alive through a database
outage (settings.CELERY_BEAT_SCHEDULER points here).

Beat is what fires the supervisor's sweep, so it must outlive the database it reads its schedule
from. django-celery-beat 2.9 mostly does: a failed change check (`schedule_changed`) or write-back
(`sync`) is logged and retried on the next tick. But every 5 minutes (SCHEDULE_SYNC_MAX_INTERVAL)
it re-reads the whole schedule (`all_as_schedule`) without catching database errors, and an
exception out of `Scheduler.tick` ends beat (`celery.beat.Service.start` only catches
KeyboardInterrupt/SystemExit). So an outage that covers one of those re-reads - any outage longer
than 5 minutes - killed beat, and with it every sweep after the database came back.
tests/e2e/test_outage_live.py reproduces it with a shortened period.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from django.db import DatabaseError, InterfaceError
from django_celery_beat.schedulers import DatabaseScheduler

logger = logging.getLogger(__name__)


class OutageTolerantDatabaseScheduler(DatabaseScheduler):
    """DatabaseScheduler whose periodic full re-read survives a database outage: the schedule
    already in memory is kept (entries, heap, last-run times) and beat goes on sending from it;
    changes made meanwhile are picked up by the next change check that reaches the database.

    The first read, at start-up, still fails loudly: without a schedule there is nothing to run,
    and the process manager's restart is the right retry.
    """

    @property
    def schedule(self) -> dict[str, Any]:
        try:
            result: dict[str, Any] = super().schedule
        except (DatabaseError, InterfaceError):
            if self._schedule is None:
                raise
            logger.exception("beat: cannot re-read the schedule from the database; keeping the one in memory")
            return self._schedule
        return result

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """One pass of beat's loop, and a touch of SAS_BEAT_HEARTBEAT_FILE when it is set: a
        container's healthcheck reads the file's age (docker/compose.yml), so a beat that hangs
        - not only one that exits - is seen (issue 19). A loop pass is at most
        CELERY_BEAT_MAX_LOOP_INTERVAL (1 s) apart."""
        interval: float = super().tick(*args, **kwargs)
        if heartbeat := os.environ.get("SAS_BEAT_HEARTBEAT_FILE"):
            try:
                Path(heartbeat).touch()
            except OSError:
                logger.warning("beat: cannot touch its heartbeat file %s", heartbeat, exc_info=True)
        return interval

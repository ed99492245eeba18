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

Beat started while the database is down waits for it, where django-celery-beat exits: its
scheduler's first read of the schedule raises, and under `make run` (honcho) one process exiting
stops the whole stack; under compose it would be restarted in a loop. The wait logs each attempt
and ends on SIGTERM or SIGINT like any beat.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.db import DatabaseError, InterfaceError, connection
from django_celery_beat.schedulers import DatabaseScheduler

logger = logging.getLogger(__name__)


class OutageTolerantDatabaseScheduler(DatabaseScheduler):
    """DatabaseScheduler whose periodic full re-read survives a database outage: the schedule
    already in memory is kept (entries, heap, last-run times) and beat goes on sending from it;
    changes made meanwhile are picked up by the next change check that reaches the database.

    The first read, at start-up, waits for the database instead (`setup_schedule`).
    """

    # The wait between two start-up attempts doubles from the first to the last, then stays.
    STARTUP_RETRY_FIRST = 0.5
    STARTUP_RETRY_MAX = 5.0

    def setup_schedule(self) -> None:
        """Read the schedule (and write its default entries), waiting for the database first
        if it does not answer: beat with no schedule has nothing to send, so it waits rather
        than exits, and sends from the first pass after the database is back."""
        delay = self.STARTUP_RETRY_FIRST
        with _exit_on_stop_signals():
            while True:
                try:
                    super().setup_schedule()
                    return
                except (DatabaseError, InterfaceError) as exc:
                    # Read again from scratch next time: django-celery-beat marks its initial
                    # read done before it reads.
                    self._initial_read = True
                    self._schedule = None
                    connection.close()
                    logger.warning(
                        "beat: the database does not answer (%s); reading the schedule again in %.1f s",
                        (str(exc).strip() or type(exc).__name__).splitlines()[0],
                        delay,
                    )
                    time.sleep(delay)
                    delay = min(delay * 2, self.STARTUP_RETRY_MAX)

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


@contextlib.contextmanager
def _exit_on_stop_signals() -> Iterator[None]:
    """SIGTERM and SIGINT end the process while the scheduler is being built. Celery's own
    handler (`celery.apps.beat.Beat.install_sync_handler`) syncs the service's scheduler first,
    and asking for it then would build a second scheduler - which would wait for the database
    in turn, so beat would never stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

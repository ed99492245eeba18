"""Loading the step an agent request names (issue 26: the agent trusts only the state store) on
the process's database connection - once more on a new one if it died while the worker idled -
and giving a pooled connection back before the remote call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection

from scheduler.selectors import HeldRequest

logger = logging.getLogger(__name__)


def request_loaded(read: Callable[[], HeldRequest | None]) -> HeldRequest | None:
    """`read()` on the process's connection; once more on a new one if that connection died
    while idle (PostgreSQL restarted: workers do not health-check it before every task). A
    pooled connection goes back to the pool once read (`pooled_connection_returned`)."""
    try:
        held = read()
    except (InterfaceError, OperationalError):
        if connection.in_atomic_block or (connection.connection is not None and connection.is_usable()):
            raise
        logger.warning("database connection lost; loading the step again on a new one")
        connection.close()
        held = read()
    pooled_connection_returned()
    return held


def pooled_connection_returned() -> None:
    """Give the thread's pooled connection back (DATABASE_POOL_MAX_SIZE) before the remote call.
    A pooled connection stays checked out by its thread until closed (the task's end), and the
    request is loaded before a call of up to the step's timeout: the Procfile's agents-http runs
    8 threads on a pool of 2, so 6 threads waited DATABASE_POOL_TIMEOUT for a connection, failed
    with no reply, and their steps were held until taken back (issue 26's noisy neighbour test).
    The reply takes one again for its one write. Not inside a transaction (eager runs, tests),
    and a plain connection (no pool) is kept: closing it would cost a connect per task."""
    if getattr(connection, "pool", None) is not None and not connection.in_atomic_block:
        connection.close()

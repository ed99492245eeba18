"""What /readyz checks: the database answers, every migration is applied, the broker answers.

Each check returns "" when fine or the reason it is not, so a load balancer's 503 says why.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

logger = logging.getLogger(__name__)

# Once every migration is applied it stays so for this process's code: a new migration comes
# with new code, i.e. a new process. So the plan (a walk of the migration graph, tens of ms) is
# computed until it is empty once, then never again.
_migrated = False


def database_check() -> str:
    try:
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:
        logger.warning("readyz: database unreachable", exc_info=True)
        return f"database unreachable: {exc.__class__.__name__}"
    return ""


def migrations_check() -> str:
    global _migrated
    if _migrated:
        return ""
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connections[DEFAULT_DB_ALIAS])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as exc:
        logger.warning("readyz: cannot read the migrations", exc_info=True)
        return f"migrations unknown: {exc.__class__.__name__}"
    if plan:
        return f"{len(plan)} migrations not applied"
    _migrated = True
    return ""


def broker_check(*, timeout: float = 1.0) -> str:
    """Connect to the broker (Redis or RabbitMQ) once, with a short timeout."""
    from kombu import Connection

    try:
        with Connection(
            settings.CELERY_BROKER_URL,
            connect_timeout=timeout,
            transport_options={**settings.CELERY_BROKER_TRANSPORT_OPTIONS, "socket_timeout": timeout},
        ) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0)
            # Redis' transport connects lazily; a channel PINGs it.
            conn.default_channel  # noqa: B018
    except Exception as exc:
        logger.warning("readyz: broker unreachable", exc_info=True)
        return f"broker unreachable: {exc.__class__.__name__}"
    return ""

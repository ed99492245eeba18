"""Which database connection holds a session (issue 29 item 4, docs/deploying/deploy.md "Through a
pooler").

Behind PgBouncer in transaction mode every transaction may run on another server connection, so
state that outlives a transaction - a session advisory lock, a session setting - would be taken
on one server session and looked for on another (or left on a connection that another client gets
next). The platform keeps such state transaction-scoped wherever it can; what needs a session uses
`session_connection()`: the "direct" alias (DATABASE_DIRECT_URL, PostgreSQL itself) when the
settings name one, else the default connection, which then is a session of its own.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

# The alias of the direct connection (sasproject/settings/base.py, DATABASE_DIRECT_URL).
DIRECT_ALIAS = "direct"


def pooled() -> bool:
    """True when the default connection goes through a transaction-mode pooler: the settings
    name a direct connection beside it."""
    return DIRECT_ALIAS in settings.DATABASES


def session_connection() -> BaseDatabaseWrapper:
    """The connection whose session lasts across transactions."""
    return connections[DIRECT_ALIAS if pooled() else DEFAULT_DB_ALIAS]


def transaction_idle_limit() -> None:
    """Inside a transaction of the default connection behind a pooler: PostgreSQL ends it after
    DATABASE_IDLE_IN_TRANSACTION_TIMEOUT seconds idle, as the startup option does for a direct
    connection (which PgBouncer refuses to pass on). Transaction-scoped (set_config's `true`): the
    server connection goes back to the pool as it came. Nothing to do without a pooler (the
    option is the session's) or without the setting."""
    seconds = float(settings.DATABASE_IDLE_IN_TRANSACTION_TIMEOUT)
    if not pooled() or seconds <= 0:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('idle_in_transaction_session_timeout', %s, true)", [str(int(seconds * 1000))]
        )

"""A virtual clock for the engine: Python's and the database's "now" moved together, at once.

The engine reads time in two places (scheduler/clock.py says which): the database's
`statement_timestamp()` (claims' complete_by and start_by, backoffs' not_before, the
supervisor's "past complete-by", the jobs dispatcher's due rows; Django's `Now()` is the same
function) and Python's `scheduler.clock.now()` / `.sleep()` (the agent's deadline checks and
the pauses between its tries).

The database side is moved without changing a statement: PostgreSQL searches `pg_catalog`
first only when the search_path does not name it (docs, "The Schema Search Path"); a
search_path of `sas_vclock, pg_catalog, ...` makes every unqualified `statement_timestamp()`,
`now()`, `transaction_timestamp()` and `clock_timestamp()` - in queries, in Django's SQL and in
the PL/pgSQL functions alike - resolve to this module's functions of the same name, which add
the session setting `sas.clock_offset` to the real one. Production sets neither the schema nor
the search_path, so it runs the built-in functions as before (bench/clock_seam.py measures it).

The clock is real time plus an offset that only grows: rows stamped by a column default (built
at DDL time, so the real clock) are never later than the virtual now.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from scheduler import clock as engine_clock

SCHEMA = "sas_vclock"
OFFSET_SETTING = "sas.clock_offset"

_SHADOWED = ("statement_timestamp", "now", "transaction_timestamp", "clock_timestamp")

_FUNCTION = """
CREATE OR REPLACE FUNCTION {schema}.{name}() RETURNS timestamptz
LANGUAGE sql {volatility} PARALLEL SAFE AS $$
    SELECT pg_catalog.{name}()
        + coalesce(nullif(pg_catalog.current_setting('{setting}', true), ''), '0')::interval
$$
"""


def _install_sql() -> str:
    """The shadow schema and its functions (idempotent), then the search path that finds them
    first - in this session only, and inside the caller's transaction (the test's), so both go
    away when it rolls back. Returns the search path it replaced."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('search_path')")
        before: str = cursor.fetchone()[0]
        cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        for name in _SHADOWED:
            volatility = "VOLATILE" if name == "clock_timestamp" else "STABLE"
            cursor.execute(
                _FUNCTION.format(schema=SCHEMA, name=name, volatility=volatility, setting=OFFSET_SETTING)
            )
        cursor.execute(
            "SELECT set_config('search_path', %s || ', pg_catalog, ' || current_setting('search_path'),"
            " false)",
            [SCHEMA],
        )
    return before


def _uninstall_sql(search_path: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('search_path', %s, false)", [search_path])
        cursor.execute("SELECT set_config(%s, '0 seconds', false)", [OFFSET_SETTING])


class VirtualClock:
    """Real time plus `offset`; `advance` moves the engine's Python clock and its database
    clock together. Used as `with virtual_clock() as clock:` (or through `Harness`)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return timezone.now() + self.offset

    def advance(self, seconds: float) -> datetime:
        """Move the clock `seconds` forward (never back: the engine's deadlines only grow)."""
        if seconds < 0:
            raise ValueError(f"the virtual clock only moves forward (asked {seconds}s)")
        self.offset += timedelta(seconds=seconds)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config(%s, %s, false)",
                [OFFSET_SETTING, f"{self.offset.total_seconds():.6f} seconds"],
            )
        return self.now()

    def advance_to(self, moment: datetime) -> datetime:
        """Move the clock to `moment` (nothing when it has passed)."""
        return self.advance(max(0.0, (moment - self.now()).total_seconds()))

    def sleep(self, seconds: float) -> None:
        """What the engine's `clock.sleep` does under the harness: the wait passes at once."""
        self.advance(max(0.0, seconds))

    def db_now(self) -> datetime:
        """The database's (virtual) now, as the engine's SQL reads it."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            value: datetime = cursor.fetchone()[0]
        return value


@contextmanager
def virtual_clock() -> Iterator[VirtualClock]:
    """Install a virtual clock for the block: the shadow SQL functions and search path, and
    `scheduler.clock.now` / `.sleep` rebound to it; both restored when the block ends (the SQL
    side also goes with the test's transaction)."""
    if not connection.in_atomic_block:
        raise RuntimeError(
            "the virtual clock needs the test's transaction (pytest-django's `db` fixture): its "
            "search path and offset are set inside it, and go away with its rollback"
        )
    clock = VirtualClock()
    search_path = _install_sql()
    saved = (engine_clock.now, engine_clock.sleep)
    engine_clock.now, engine_clock.sleep = clock.now, clock.sleep
    try:
        yield clock
    finally:
        engine_clock.now, engine_clock.sleep = saved
        _uninstall_sql(search_path)

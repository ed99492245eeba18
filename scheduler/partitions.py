"""Tables range-partitioned by time (issue 29, item 1): which partitions a table has, making
the next ones ahead of time, and detaching and dropping one whole.

One parent per history table (`PARTITIONED` below, and the operator's audit, which ops
declares), one partition per UTC day (or month), named `<table>_pYYYYMMDD` (`_pYYYYMM`), and
a `<table>_default` partition that catches a row whose period has no partition yet (a clock
far ahead, a test's history of last January): nothing is ever refused for want of a partition.
Making a period's partition moves that period's rows out of the default first, so the default
stays empty in steady state and never blocks an attach. Decision record 42 (branch storage).

Table and partition names are identifiers the platform makes, never input: they are quoted
with psycopg's `sql.Identifier`, and the bounds are bound parameters.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from django.db import OperationalError, connection, transaction
from psycopg import sql

# A partition's DDL waits at most this long for its lock: a long report holding the parent
# never queues the engine's writes behind a waiting ALTER (the next tick tries again).
DDL_LOCK_TIMEOUT = "5s"


@dataclass(frozen=True)
class PartitionedTable:
    """A parent table range-partitioned on `column` (timestamptz) by `period` ("day" or "month")."""

    table: str
    column: str
    period: str = "day"

    def __post_init__(self) -> None:
        if self.period not in ("day", "month"):
            raise ValueError(f"a partition period is 'day' or 'month', not {self.period!r}")

    @property
    def default(self) -> str:
        return f"{self.table}_default"

    def lower(self, when: date) -> date:
        """The first day of the period holding `when`."""
        return when if self.period == "day" else when.replace(day=1)

    def following(self, lower: date) -> date:
        """The first day of the period after the one starting at `lower`."""
        if self.period == "day":
            return lower + timedelta(days=1)
        return (lower.replace(day=28) + timedelta(days=4)).replace(day=1)

    def name(self, lower: date) -> str:
        return f"{self.table}_p{lower:%Y%m%d}" if self.period == "day" else f"{self.table}_p{lower:%Y%m}"


# The engine's history: attempt and job-occurrence history (one table) and the run events.
HISTORY = PartitionedTable("scheduler_taskexecutionhistory", "started_at", "day")
EVENTS = PartitionedTable("scheduler_runevent", "created_at", "day")


@dataclass(frozen=True)
class Partition:
    name: str
    # UTC midnight bounds; None for the default partition.
    lower: datetime | None
    upper: datetime | None

    @property
    def is_default(self) -> bool:
        return self.lower is None


_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


def _utc(value: date) -> datetime:
    return datetime(value.year, value.month, value.day, tzinfo=UTC)


def partitions_list(spec: PartitionedTable) -> list[Partition]:
    """The table's partitions, oldest first, the default (if any) last."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = %s::regclass",
            [spec.table],
        )
        rows = cursor.fetchall()
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound)
        if match is None:
            found.append(Partition(name, None, None))
            continue
        lower, upper = (datetime.fromisoformat(v).astimezone(UTC) for v in match.groups())
        found.append(Partition(name, lower, upper))
    return sorted(found, key=lambda p: (p.lower is None, p.lower or datetime.min.replace(tzinfo=UTC)))


def is_partitioned(table: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(%s)", [table])
        row = cursor.fetchone()
    return bool(row and row[0])


def partition_ensure(spec: PartitionedTable, lower: date) -> bool:
    """Make the partition of the period starting at `lower` unless it exists; the rows of that
    period sitting in the default partition are moved into it in the same transaction. True
    when made. Idempotent: two makers at once meet on the parent's lock, the second finds it."""
    lower = spec.lower(lower)
    name = spec.name(lower)
    low, high = _utc(lower), _utc(spec.following(lower))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
        # Serialises makers of this table (the lock the ATTACH takes anyway), then look again.
        cursor.execute(
            sql.SQL("LOCK TABLE {} IN SHARE UPDATE EXCLUSIVE MODE").format(sql.Identifier(spec.table))
        )
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [name])
        if cursor.fetchone()[0]:
            return False
        ident, parent = sql.Identifier(name), sql.Identifier(spec.table)
        cursor.execute(
            sql.SQL("SELECT EXISTS (SELECT 1 FROM {} WHERE {} >= %s AND {} < %s)").format(
                sql.Identifier(spec.default), sql.Identifier(spec.column), sql.Identifier(spec.column)
            ),
            [low, high],
        )
        if not cursor.fetchone()[0]:
            cursor.execute(
                sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM (%s) TO (%s)").format(ident, parent),
                [low, high],
            )
            return True
        cursor.execute(
            sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)").format(
                ident, parent
            )
        )
        cursor.execute(
            sql.SQL(
                "WITH moved AS (DELETE FROM {} WHERE {} >= %s AND {} < %s RETURNING *)"
                " INSERT INTO {} SELECT * FROM moved"
            ).format(
                sql.Identifier(spec.default), sql.Identifier(spec.column), sql.Identifier(spec.column), ident
            ),
            [low, high],
        )
        cursor.execute(
            sql.SQL("ALTER TABLE {} ATTACH PARTITION {} FOR VALUES FROM (%s) TO (%s)").format(parent, ident),
            [low, high],
        )
    return True


def default_periods(spec: PartitionedTable, limit: int = 100) -> list[date]:
    """The periods (first days) that have rows in the default partition: each gets its own."""
    with connection.cursor() as cursor:
        cursor.execute(
            sql.SQL(
                "SELECT DISTINCT date_trunc({}, {} AT TIME ZONE 'UTC')::date FROM {} ORDER BY 1 LIMIT %s"
            ).format(sql.Literal(spec.period), sql.Identifier(spec.column), sql.Identifier(spec.default)),
            [limit],
        )
        return [row[0] for row in cursor.fetchall()]


def partitions_ensure_ahead(spec: PartitionedTable, *, today: date, days_ahead: int) -> list[str]:
    """Every period from `today` to `today + days_ahead` has its partition, and every period with
    rows in the default partition too (moved out of it). Returns the partitions made."""
    made = []
    wanted = set(default_periods(spec))
    lower = spec.lower(today)
    while lower <= today + timedelta(days=days_ahead):
        wanted.add(lower)
        lower = spec.following(lower)
    for lower in sorted(wanted):
        if partition_ensure(spec, lower):
            made.append(spec.name(lower))
    return made


DROP_ATTEMPTS = 5


def partition_detach_drop(spec: PartitionedTable, name: str) -> None:
    """Detach partition `name` from the table and drop it, in one transaction (a reader sees the
    rows or not at all). Refuses the default partition and any table not a partition of `spec`."""
    if name == spec.default or name not in {p.name for p in partitions_list(spec)}:
        raise ValueError(f"{name} is not a dated partition of {spec.table}")
    for attempt in range(1, DROP_ATTEMPTS + 1):
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"SET LOCAL lock_timeout = '{DDL_LOCK_TIMEOUT}'")
                cursor.execute(
                    sql.SQL("ALTER TABLE {} DETACH PARTITION {}").format(
                        sql.Identifier(spec.table), sql.Identifier(name)
                    )
                )
                cursor.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
            return
        except OperationalError as exc:
            # A writer of the table holding its lock (lock_timeout) or waiting in the other order
            # (a deadlock PostgreSQL broke by cancelling this side): nothing was changed; again
            # shortly, then left to the next maintenance tick.
            code = getattr(getattr(exc, "__cause__", None), "sqlstate", None)
            if code not in ("40P01", "55P03") or attempt == DROP_ATTEMPTS:
                raise
            time.sleep(0.2 * attempt)


def partitions_expired(spec: PartitionedTable, *, now: datetime, keep: timedelta) -> list[Partition]:
    """The dated partitions whose every row is older than `now - keep` (upper bound at or before
    it): the ones retention drops. The current period's is never among them (keep > 0)."""
    if keep <= timedelta(0):
        raise ValueError("a retention period is positive")
    cutoff = now - keep
    return [p for p in partitions_list(spec) if p.upper is not None and p.upper <= cutoff]

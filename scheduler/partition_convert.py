"""A migration's one operation for issue 29: turn a plain table into a parent range-partitioned
by time, its rows moved, its indexes, checks and foreign keys as they were (same names), its
primary key widened to hold the partition key (and the owner, for tenant history).

Used by scheduler's and ops' migrations (history, run events, the operator's audit). The table
is rebuilt, so this takes the table's lock for as long as its rows take to copy: run it in a
maintenance window on a big install (docs/deploying/deploy.md, "Retention"). Decision record 42.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from psycopg import sql

from scheduler.partitions import PartitionedTable

# The owner (user id) of a tenant history row, filled on insert when the writer did not say it:
# the run's owner, else (a job occurrence's row) the job's; 0 when neither has one (a run with
# no owner: the platform's own). The writers stay as they are (the engine's statements name no
# owner); the primary key holds the owner, as Citus needs its distribution column there.
OWNER_FUNCTIONS = """
CREATE OR REPLACE FUNCTION sas_history_owner_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner_id IS NULL THEN
        NEW.owner_id := coalesce(
            (SELECT r.owner_id FROM scheduler_run AS r WHERE r.id = NEW.run_id),
            (SELECT r.owner_id FROM scheduler_step AS s JOIN scheduler_run AS r ON r.id = s.run_id
              WHERE s.id = NEW.step_id),
            (SELECT j.owner_id FROM scheduler_job AS j WHERE j.id = NEW.job_id),
            0);
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION sas_event_owner_fill() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.owner_id IS NULL THEN
        NEW.owner_id := coalesce((SELECT r.owner_id FROM scheduler_run AS r WHERE r.id = NEW.run_id), 0);
    END IF;
    RETURN NEW;
END $$;
"""


def _one(cursor: Any, query: str, params: Sequence[Any] = ()) -> list[Any]:
    cursor.execute(query, params)
    return cursor.fetchall()


def table_partition_by_range(
    schema_editor: BaseDatabaseSchemaEditor,
    *,
    spec: PartitionedTable,
    primary_key: Sequence[str],
    unique: dict[str, Sequence[str]] | None = None,
    owner_fill: str | None = None,
    periods_ahead: int = 7,
) -> None:
    """Rebuild `spec.table` as a partitioned parent. `primary_key`: its new columns; `unique`:
    the unique constraints that replace the old ones (name -> columns, each holding the
    partition key); `owner_fill`: the trigger function that fills a new `owner_id` column (NOT
    NULL) - the old rows get it through the same function's rule, applied by an UPDATE-free
    INSERT ... SELECT. Partitions: one per period that has rows, `periods_ahead` periods from
    today, and the default."""
    table, old = spec.table, f"{spec.table}_unpartitioned"
    t, o = sql.Identifier(table), sql.Identifier(old)
    with schema_editor.connection.cursor() as cursor:
        indexes, constraints, columns = _table_shape(cursor, table)
        cursor.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(t, o))
        cursor.execute(
            sql.SQL(
                "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE)"
                " PARTITION BY RANGE ({})"
            ).format(t, o, sql.Identifier(spec.column))
        )
        if owner_fill:
            cursor.execute(sql.SQL("ALTER TABLE {} ADD COLUMN owner_id integer").format(t))
        cursor.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} DEFAULT").format(sql.Identifier(spec.default), t)
        )
        _dated_partitions(cursor, spec, old, periods_ahead)
        if owner_fill:
            cursor.execute(OWNER_FUNCTIONS)
            cursor.execute(
                sql.SQL("CREATE TRIGGER {} BEFORE INSERT ON {} FOR EACH ROW EXECUTE FUNCTION {}()").format(
                    sql.Identifier(f"{table}_owner_fill"), t, sql.Identifier(owner_fill)
                )
            )
        names = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        # Through the parent, so the trigger fills each old row's owner as it fills a new one's.
        cursor.execute(sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(t, names, names, o))
        cursor.execute(sql.SQL("DROP TABLE {}").format(o))
        if owner_fill:
            cursor.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN owner_id SET NOT NULL").format(t))
        _restore_shape(cursor, t, indexes, constraints, {f"{table}_pkey": primary_key, **(unique or {})})
        cursor.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), max(id)) FROM {} HAVING max(id) IS NOT NULL"
            ).format(t),
            [table],
        )


def _table_shape(cursor: Any, table: str) -> tuple[list[Any], list[Any], list[str]]:
    """What a rebuild must carry over: the indexes no constraint owns, the CHECK and FOREIGN KEY
    constraints, and the columns in order. Refuses a table another table's key points at."""
    incoming = _one(cursor, "SELECT conname FROM pg_constraint WHERE confrelid = %s::regclass", [table])
    if incoming:
        raise RuntimeError(f"{table} is referenced by {incoming}: drop those constraints first")
    indexes = _one(
        cursor,
        "SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i WHERE i.indrelid = %s::regclass"
        " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
        [table],
    )
    constraints = _one(
        cursor,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = %s::regclass AND contype IN ('c', 'f') ORDER BY conname",
        [table],
    )
    columns = _one(
        cursor,
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum",
        [table],
    )
    return list(indexes), list(constraints), [r[0] for r in columns]


def _restore_shape(
    cursor: Any, t: sql.Identifier, indexes: list[Any], constraints: list[Any], keys: dict[str, Sequence[str]]
) -> None:
    """The indexes and constraints read by `_table_shape`, then the new keys (`<table>_pkey`
    is the primary key, every other name a UNIQUE constraint)."""
    for (definition,) in indexes:
        cursor.execute(definition)
    for name, definition in constraints:
        cursor.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} ").format(t, sql.Identifier(name)) + sql.SQL(definition)
        )
    for name, cols in keys.items():
        kind = sql.SQL("PRIMARY KEY" if name.endswith("_pkey") else "UNIQUE")
        cursor.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {} ({})").format(
                t, sql.Identifier(name), kind, sql.SQL(", ").join(sql.Identifier(c) for c in cols)
            )
        )


def _dated_partitions(cursor: Any, spec: PartitionedTable, old: str, periods_ahead: int) -> None:
    cursor.execute(
        sql.SQL("SELECT DISTINCT date_trunc({}, {} AT TIME ZONE 'UTC')::date FROM {}").format(
            sql.Literal(spec.period), sql.Identifier(spec.column), sql.Identifier(old)
        )
    )
    wanted = {spec.lower(row[0]) for row in cursor.fetchall()}
    lower = spec.lower(datetime.now(UTC).date())
    for _ in range(periods_ahead + 1):
        wanted.add(lower)
        lower = spec.following(lower)
    for lower in sorted(wanted):
        low = datetime(lower.year, lower.month, lower.day, tzinfo=UTC)
        high_day = spec.following(lower)
        high = datetime(high_day.year, high_day.month, high_day.day, tzinfo=UTC)
        cursor.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES FROM (%s) TO (%s)").format(
                sql.Identifier(spec.name(lower)), sql.Identifier(spec.table)
            ),
            [low, high],
        )


def table_unpartition(
    schema_editor: BaseDatabaseSchemaEditor,
    *,
    spec: PartitionedTable,
    unique: dict[str, Sequence[str]] | None = None,
    drop_owner: bool = False,
) -> None:
    """The reverse of `table_partition_by_range`: a plain table again, every partition's rows in
    it, primary key (id), `unique` restored (name -> columns), the owner column (and its
    trigger) dropped when `drop_owner`."""
    table, old = spec.table, f"{spec.table}_partitioned"
    t, o = sql.Identifier(table), sql.Identifier(old)
    with schema_editor.connection.cursor() as cursor:
        indexes = _one(
            cursor,
            "SELECT replace(pg_get_indexdef(i.indexrelid), ' ON ONLY ', ' ON ') FROM pg_index i"
            " WHERE i.indrelid = %s::regclass"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
            [table],
        )
        constraints = _one(
            cursor,
            "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conrelid = %s::regclass AND contype IN ('c', 'f') ORDER BY conname",
            [table],
        )
        cursor.execute(sql.SQL("ALTER TABLE {} RENAME TO {}").format(t, o))
        cursor.execute(
            sql.SQL(
                "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE)"
            ).format(t, o)
        )
        cursor.execute(sql.SQL("INSERT INTO {} SELECT * FROM {}").format(t, o))
        cursor.execute(sql.SQL("DROP TABLE {} CASCADE").format(o))
        if drop_owner:
            cursor.execute(sql.SQL("ALTER TABLE {} DROP COLUMN owner_id").format(t))
        for (definition,) in indexes:
            cursor.execute(definition)
        for name, definition in constraints:
            cursor.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} ").format(t, sql.Identifier(name))
                + sql.SQL(definition)
            )
        for name, cols in {f"{table}_pkey": ["id"], **(unique or {})}.items():
            kind = sql.SQL("PRIMARY KEY" if name.endswith("_pkey") else "UNIQUE")
            cursor.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {} ({})").format(
                    t, sql.Identifier(name), kind, sql.SQL(", ").join(sql.Identifier(c) for c in cols)
                )
            )
        cursor.execute(
            sql.SQL(
                "SELECT setval(pg_get_serial_sequence(%s, 'id'), max(id)) FROM {} HAVING max(id) IS NOT NULL"
            ).format(t),
            [table],
        )

"""A migration's operations for issue 29, item 3: a tenant table's keys made to hold its owner,
so the table could be distributed by owner (Citus) without a schema change (decision record 55).

Django's model state keeps `id` as the models' primary key (the ORM reads and writes by one
column); the database's PRIMARY KEY is (id, owner) and a UNIQUE (id) stays only where a
single-column foreign key still needs one. A primary key that foreign keys depend on cannot be
dropped without them, so `table_rekey` drops every foreign key that references the table, swaps
the keys, and adds them back (the ones the caller replaced with composite ones excepted) - all
in the migration's transaction.

Used by scheduler's, alerting's and exports' migrations; `tests/scheduler/test_tenant_keys.py`
reads the catalog to assert the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from psycopg import sql

# The owner of a row of a table below a job (its next/queued rows, its dependency edges and
# gates), filled on insert from the job when the writer did not say it (the ORM's callers that
# build rows from a job id). The trigger's WHEN makes a writer that names the owner pay nothing.
OWNER_FROM_JOB = """
CREATE OR REPLACE FUNCTION sas_owner_from_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.owner_id := (SELECT j.owner_id FROM scheduler_job AS j WHERE j.id = NEW.{column});
    RETURN NEW;
END $$;
"""


def _rows(cursor: Any, query: str, params: Sequence[Any] = ()) -> list[Any]:
    cursor.execute(query, params)
    return cursor.fetchall()


def referencing_foreign_keys(cursor: Any, table: str) -> list[tuple[str, str, str]]:
    """(referencing table, constraint name, definition) of every foreign key to `table`."""
    return [
        (t, n, d)
        for t, n, d in _rows(
            cursor,
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'f' AND confrelid = %s::regclass ORDER BY 1, 2",
            [table],
        )
    ]


def owner_column_add(
    schema_editor: BaseDatabaseSchemaEditor, *, table: str, job_column: str, trigger: str
) -> None:
    """`table` gains `owner_id integer NOT NULL`, its rows' owner copied from their job, and a
    trigger that fills it on insert when the writer leaves it out."""
    t = sql.Identifier(table)
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql.SQL("ALTER TABLE {} ADD COLUMN owner_id integer").format(t))
        cursor.execute(
            sql.SQL(
                "UPDATE {} AS x SET owner_id = j.owner_id FROM scheduler_job AS j WHERE j.id = x.{}"
            ).format(t, sql.Identifier(job_column))
        )
        cursor.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN owner_id SET NOT NULL").format(t))
        function = f"sas_{table.removeprefix('scheduler_')}_owner_fill"
        cursor.execute(OWNER_FROM_JOB.replace("sas_owner_from_job", function).replace("{column}", job_column))
        cursor.execute(
            sql.SQL(
                "CREATE TRIGGER {} BEFORE INSERT ON {} FOR EACH ROW WHEN (NEW.owner_id IS NULL)"
                " EXECUTE FUNCTION {}()"
            ).format(sql.Identifier(trigger), t, sql.Identifier(function))
        )


def owner_column_drop(schema_editor: BaseDatabaseSchemaEditor, *, table: str, trigger: str) -> None:
    function = f"sas_{table.removeprefix('scheduler_')}_owner_fill"
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("DROP TRIGGER {} ON {}").format(sql.Identifier(trigger), sql.Identifier(table))
        )
        cursor.execute(sql.SQL("DROP FUNCTION {}()").format(sql.Identifier(function)))
        cursor.execute(sql.SQL("ALTER TABLE {} DROP COLUMN owner_id").format(sql.Identifier(table)))


def table_rekey(
    schema_editor: BaseDatabaseSchemaEditor,
    *,
    table: str,
    primary_key: Sequence[str],
    unique_id: bool,
    replaced: dict[str, str] | None = None,
) -> None:
    """Make `table`'s PRIMARY KEY `primary_key` (same name, `<table>_pkey`), with a UNIQUE (id)
    (`<table>_id_key`) if `unique_id`. Every foreign key that references the table is dropped
    first and added back after; `replaced` maps a foreign key's name to the definition it comes
    back with (a composite one, `FOREIGN KEY (job_id, owner_id) REFERENCES ...`), or to "" for
    one that does not come back."""
    replaced = replaced or {}
    t = sql.Identifier(table)
    with schema_editor.connection.cursor() as cursor:
        foreign = referencing_foreign_keys(cursor, table)
        missing = set(replaced) - {name for _, name, _ in foreign}
        if missing:
            raise ValueError(f"{table}: no foreign key named {sorted(missing)} references it")
        for referencing, name, _ in foreign:
            cursor.execute(
                sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(
                    sql.SQL(referencing), sql.Identifier(name)
                )
            )
        pkey = sql.Identifier(f"{table}_pkey")
        cursor.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(t, pkey))
        cursor.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY ({})").format(
                t, pkey, sql.SQL(", ").join(map(sql.Identifier, primary_key))
            )
        )
        if unique_id:
            cursor.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} UNIQUE (id)").format(
                    t, sql.Identifier(f"{table}_id_key")
                )
            )
        for referencing, name, definition in foreign:
            definition = replaced.get(name, definition)
            if definition:
                cursor.execute(
                    sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                        sql.SQL(referencing), sql.Identifier(name), sql.SQL(definition)
                    )
                )


def table_unkey(
    schema_editor: BaseDatabaseSchemaEditor, *, table: str, restored: dict[str, tuple[str, str]] | None = None
) -> None:
    """The reverse of `table_rekey`: PRIMARY KEY (id) again, no UNIQUE (id). `restored` maps a
    foreign key's name to (referencing table, definition) to put back instead of the one found."""
    restored = restored or {}
    t = sql.Identifier(table)
    with schema_editor.connection.cursor() as cursor:
        foreign = {
            name: (referencing, definition)
            for referencing, name, definition in referencing_foreign_keys(cursor, table)
        }
        foreign.update(restored)
        for name, (referencing, _) in foreign.items():
            cursor.execute(
                sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
                    sql.SQL(referencing), sql.Identifier(name)
                )
            )
        cursor.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(t, sql.Identifier(f"{table}_pkey"))
        )
        cursor.execute(
            sql.SQL("ALTER TABLE {} DROP CONSTRAINT IF EXISTS {}").format(
                t, sql.Identifier(f"{table}_id_key")
            )
        )
        cursor.execute(
            sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} PRIMARY KEY (id)").format(
                t, sql.Identifier(f"{table}_pkey")
            )
        )
        for name, (referencing, definition) in foreign.items():
            cursor.execute(
                sql.SQL("ALTER TABLE {} ADD CONSTRAINT {} {}").format(
                    sql.SQL(referencing), sql.Identifier(name), sql.SQL(definition)
                )
            )

"""Local hash partitioning of jobs and their scheduled rows by owner (issue 29, item 3): what it
would cost, measured before it is built (decision record 55).

    SAS_BENCH_DB=<name> python bench/tenant_partitions.py [--partitions 8]

Rebuilds `scheduler_job` and `scheduler_scheduledjob` of the bench database (empty: run it on a
database of its own, before bench/jobs.py and bench/engine_claim_burst.py are pointed at the
same SAS_BENCH_DB) as parents PARTITION BY HASH (owner_id), `--partitions` each, with every
index, check, foreign key and trigger they had. What partitioning forbids goes: the jobs'
UNIQUE (id), and with it the alert rules' foreign key to a job (an operator's rule has no owner,
so it cannot be composite). Then compare the figures of those two scripts with the same run on
a database left plain. Not a migration: nothing in the product partitions these tables.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment

TABLES = ["scheduler_job", "scheduler_scheduledjob"]
SCHEDULED_FK = "scheduler_scheduledjob_job_id_96b2b24d_fk_scheduler_job_id"


def _rows(cursor: Any, query: str, params: Any = None) -> list[Any]:
    cursor.execute(query, params)
    return cursor.fetchall()


def hash_partition(cursor: Any, table: str, partitions: int) -> None:
    """`table` (empty) rebuilt as a parent partitioned by hash of owner_id, its shape kept."""
    old = f"{table}_plain"
    indexes = _rows(
        cursor,
        "SELECT c.relname, pg_get_indexdef(i.indexrelid)"
        " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = %s::regclass AND NOT EXISTS"
        " (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)",
        [table],
    )
    constraints = _rows(
        cursor,
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass"
        " AND contype IN ('p', 'u', 'f') AND conname <> %s ORDER BY contype = 'f', conname",
        [table, f"{table}_id_key"],
    )
    triggers = _rows(
        cursor,
        "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal",
        [table],
    )
    cursor.execute(f"ALTER TABLE {table} RENAME TO {old}")
    cursor.execute(
        f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING STORAGE"
        " INCLUDING CONSTRAINTS) PARTITION BY HASH (owner_id)"
    )
    for r in range(partitions):
        cursor.execute(
            f"CREATE TABLE {table}_h{r} PARTITION OF {table}"
            f" FOR VALUES WITH (MODULUS {partitions}, REMAINDER {r})"
        )
    cursor.execute(f"DROP TABLE {old}")
    for _, definition in indexes:
        cursor.execute(definition.replace(f" ON public.{old} ", f" ON public.{table} "))
    for name, definition in constraints:
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for (definition,) in triggers:
        cursor.execute(definition.replace(f" ON public.{old} ", f" ON public.{table} "))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", type=int, default=8)
    args = parser.parse_args()
    bench_environment()
    import django

    django.setup()
    from django.db import connection, transaction

    with transaction.atomic(), connection.cursor() as cursor:
        if _rows(cursor, "SELECT relkind FROM pg_class WHERE relname = 'scheduler_job'") == [("p",)]:
            print("already partitioned")
            return
        incoming = _rows(
            cursor,
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'f' AND confrelid = ANY(%s::regclass[]) AND NOT conrelid = ANY(%s::regclass[])",
            [TABLES, TABLES],
        )
        for referencing, name, _ in incoming:
            cursor.execute(f"ALTER TABLE {referencing} DROP CONSTRAINT {name}")
        # The scheduled rows' own foreign key to the job goes with their table and comes back
        # with it (its definition names the new parent).
        cursor.execute(f"ALTER TABLE scheduler_scheduledjob DROP CONSTRAINT {SCHEDULED_FK}")
        for table in TABLES:
            hash_partition(cursor, table, args.partitions)
        cursor.execute(
            f"ALTER TABLE scheduler_scheduledjob ADD CONSTRAINT {SCHEDULED_FK} FOREIGN KEY (job_id, owner_id)"
            " REFERENCES scheduler_job(id, owner_id) DEFERRABLE INITIALLY DEFERRED"
        )
        for referencing, name, definition in incoming:
            if "(id, owner_id)" in definition:
                cursor.execute(f"ALTER TABLE {referencing} ADD CONSTRAINT {name} {definition}")
            else:
                print(f"dropped (partitioning allows no UNIQUE (id)): {referencing}.{name} {definition}")
        for table in TABLES:
            count = _rows(cursor, "SELECT count(*) FROM pg_inherits WHERE inhparent = %s::regclass", [table])
            print(table, "partitions:", count[0][0])


if __name__ == "__main__":
    main()

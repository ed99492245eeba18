"""A partition's archive (issue 29, item 2): its rows as compressed JSON lines, one file per
partition, `<SAS_ARCHIVE_DIR>/<table>/<partition>.jsonl.gz`, written before the partition is
dropped, and loaded back for an investigation (`manage.py storage_archive_load`).

Each line is the row as PostgreSQL's `to_jsonb` writes it (column name -> value), so loading
back is `jsonb_populate_recordset` into a table of the parent's row type: no column list to
keep in step with the models.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from django.db import connection, transaction
from psycopg import sql

from scheduler.partitions import PartitionedTable

READ_BATCH = 5000
LOAD_BATCH = 2000


def archive_path(folder: Path, spec: PartitionedTable, partition: str) -> Path:
    return folder / spec.table / f"{partition}.jsonl.gz"


def partition_archive_write(*, spec: PartitionedTable, partition: str, folder: Path) -> tuple[Path, int]:
    """Write every row of `partition` to its archive file; returns (path, rows). Written under
    a temporary name, synced, then renamed: a file under the final name is always whole. Reads
    in one transaction (a consistent snapshot), through a server-side cursor."""
    path = archive_path(folder, spec, partition)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    rows = 0
    query = sql.SQL("SELECT to_jsonb(t)::text FROM {} AS t ORDER BY {}").format(
        sql.Identifier(partition), sql.Identifier(spec.column)
    )
    with (
        transaction.atomic(),
        connection.chunked_cursor() as cursor,
        gzip.open(partial, "wt", encoding="utf-8") as out,
    ):
        cursor.execute(query.as_string(connection.connection))
        while batch := cursor.fetchmany(READ_BATCH):
            out.writelines(f"{line}\n" for (line,) in batch)
            rows += len(batch)
    with open(partial, "rb") as done:
        os.fsync(done.fileno())
    partial.replace(path)
    return path, rows


def archive_load(*, path: Path, spec: PartitionedTable, into: str) -> int:
    """Load an archive's rows into table `into`, made (LIKE the parent: its columns, defaults and
    checks, no keys) when it does not exist; an existing table must have the parent's columns.
    Returns the rows loaded. One transaction: a bad file loads nothing."""
    if not path.is_file():
        raise FileNotFoundError(f"no archive at {path}")
    target, parent = sql.Identifier(into), sql.Identifier(spec.table)
    insert = sql.SQL("INSERT INTO {} SELECT * FROM jsonb_populate_recordset(NULL::{}, %s::jsonb)").format(
        target, parent
    )
    loaded = 0
    with (
        transaction.atomic(),
        connection.cursor() as cursor,
        gzip.open(path, "rt", encoding="utf-8") as lines,
    ):
        cursor.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            ).format(target, parent)
        )
        batch: list[object] = []
        for line in lines:
            batch.append(json.loads(line))
            if len(batch) == LOAD_BATCH:
                cursor.execute(insert, [json.dumps(batch)])
                loaded += len(batch)
                batch = []
        if batch:
            cursor.execute(insert, [json.dumps(batch)])
            loaded += len(batch)
    return loaded

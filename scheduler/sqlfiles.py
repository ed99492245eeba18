"""The one loader of named SQL, and the three ways the house runs one statement.

A .sql file of named statements is blocks that each start with `-- name: <name>`
(`scheduler/sql/queries.sql`, `scheduler/dispatcher/jobs.sql`, `reports/sql/report.sql`);
`named_statements` reads one once per process. `functions.sql` (PL/pgSQL, installed by the
migrations) is not named statements.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection
from psycopg.types.datetime import TimestamptzLoader

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def named_statements(path: Path) -> dict[str, str]:
    """The `-- name: <name>` blocks of a .sql file: name -> statement. Read once per process."""
    parts = _NAME.split(path.read_text())
    # parts: [preamble, name1, body1, name2, body2, ...]
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def sql_rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Run one statement; its rows (none for a statement without RETURNING)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def sql_count(sql: str, params: dict[str, Any]) -> int:
    """Run one statement; the rows it touched (the transition's concurrency check)."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return int(cursor.rowcount)


def c_timestamptz(cursor: psycopg.Cursor[Any]) -> None:
    """Read `timestamptz` columns on this cursor with psycopg's own loader (its C version) rather
    than the one Django registers on the connection, which wraps it in Python to attach the
    connection's time zone. With USE_TZ and the connection in UTC (Django sets it) both give the
    same aware datetime (tzinfo datetime.timezone.utc); psycopg's is ~10x faster: 18,000 values
    in 13 ms instead of 137 ms, and a claimed row of the dispatcher carries nine of them."""
    if settings.USE_TZ:
        cursor.adapters.register_loader("timestamptz", TimestamptzLoader)


_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@cache
def _binary(sql: str) -> bytes:
    """`sql` with every `%(name)s` placeholder as `%(name)b`: its value sent in binary."""
    return _PLACEHOLDER.sub(r"%(\1)b", sql).encode()


def bulk_rows(sql: str, params: dict[str, Any]) -> tuple[list[tuple[Any, ...]], int]:
    """Run one statement with server-side binding: its rows and its row count.

    For the bulk statements (arrays of thousands of elements, one per row written). Django's
    cursor binds client-side - psycopg quotes every array element into the statement's text in
    Python, which was 40-50% of those statements' time in the dispatcher's profile
    (bench/README.md, "Jobs"); bound on the server, the arrays travel as parameters, every one
    in binary: psycopg's text format escapes and quotes each array element in Python (the
    dispatcher's cProfile of 2026-11-26: a third of `runs_insert_many`'s time), its binary
    format packs them (1,000-element arrays of eight types: 61 ms to dump instead of 381 ms,
    under load). Same connection and transaction as Django's; errors are Django's."""
    connection.ensure_connection()
    with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
        c_timestamptz(cursor)
        cursor.execute(_binary(sql), params)
        rows = list(cursor.fetchall()) if cursor.description else []
        return rows, int(cursor.rowcount)

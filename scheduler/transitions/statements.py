"""The transitions' SQL: the named statements of `scheduler/sql/queries.sql`, the functions of
`functions.sql` (installed by migrations) and the helpers that run one by name. Changes when how
SQL is stored or run changes, never for a transition's rule."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from scheduler.sqlfiles import named_statements, sql_count, sql_rows

if TYPE_CHECKING:
    pass


SQL_DIR = Path(__file__).resolve().parent.parent / "sql"
FUNCTIONS_FILE = SQL_DIR / "functions.sql"
QUERIES_FILE = SQL_DIR / "queries.sql"
# Concurrency keys and pauses (issue 30, scheduler/holds.md), installed by `install_holds`.
HOLDS_FILE = SQL_DIR / "holds.sql"

# Raised by sas_step_succeed when the caller did not open a transaction for an observed run.
SQLSTATE_RUN_OBSERVED = "SAS01"


@cache
def engine_queries() -> dict[str, str]:
    """The named statements of queries.sql, read once per process."""
    return named_statements(QUERIES_FILE)


def install_functions(conn: BaseDatabaseWrapper | None = None) -> None:
    """CREATE OR REPLACE every function of functions.sql (migrations call this). The file is
    the newest text, which may name columns a later migration adds: bodies are checked when
    they run, not when an earlier migration installs them; the last migration installs last."""
    conn = conn or connection
    # Transaction-scoped (a migration's transaction, or this one): nothing outlives it on the
    # server connection, which a transaction-mode pooler hands to the next client (issue 29).
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        cursor.execute("SET LOCAL check_function_bodies = off")
        cursor.execute(FUNCTIONS_FILE.read_text())


def install_holds(conn: BaseDatabaseWrapper | None = None) -> None:
    """CREATE OR REPLACE holds.sql's functions and triggers (issue 30; migration 0032 and any later
    one that changes the file). Apart from functions.sql: its triggers name columns that the
    migrations before 0032, which install functions.sql, do not have yet."""
    with (conn or connection).cursor() as cursor:
        cursor.execute(HOLDS_FILE.read_text())


def _json(value: Any) -> Any:
    # Django registers a jsonb loader that returns text (JSONField decodes it); decode here.
    return json.loads(value) if isinstance(value, str) else value


def _one(name: str, params: dict[str, Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(engine_queries()[name], params)
        row = cursor.fetchone()
    return None if row is None else row


def _scalar_json(name: str, params: dict[str, Any]) -> Any:
    row = _one(name, params)
    return _json(row[0]) if row else None


def _rows(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sql_rows(engine_queries()[name], params)


def _count(name: str, params: dict[str, Any]) -> int:
    return sql_count(engine_queries()[name], params)

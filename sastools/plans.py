"""Reading a query plan on range-partitioned tables (issue 29): an index of the parent is a
family (the partitioned index and one index per partition, named by PostgreSQL), and a plan
names the partitions it reads. For plan tests."""

from __future__ import annotations

import re

from django.db import connection


def index_family(name: str) -> set[str]:
    """The index `name` and, when it is a partitioned index, every partition's index of it."""
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH RECURSIVE family(oid) AS (SELECT to_regclass(%s)::oid"
            " UNION ALL SELECT i.inhrelid FROM pg_inherits i JOIN family f ON i.inhparent = f.oid)"
            " SELECT c.relname FROM family f JOIN pg_class c ON c.oid = f.oid",
            [name],
        )
        return {row[0] for row in cursor.fetchall()}


def uses_index(plan: str, name: str) -> bool:
    """The plan reads index `name` (or a partition's index of it)."""
    return any(re.search(rf"\b{re.escape(member)}\b", plan) for member in index_family(name))


def partitions_read(plan: str, table: str) -> set[str]:
    """The partitions of `table` the plan reads (its dated ones and its default)."""
    return set(re.findall(rf"\b({re.escape(table)}_(?:p\d{{6,8}}|default))\b", plan))

"""The jobs' state changes: one named function and one conditional statement each.

The SQL is in `scheduler/dispatcher/jobs.sql` (named statements, loaded once); the guard of each is in
its WHERE clause and the rows it touched are the concurrency check. Time is the database clock.
What follows a transition (runs started, history rows, retries) is orchestration, in
`scheduler/services/jobs.py` and `scheduler/dispatcher/tick.py`. The rules: `scheduler/jobs.md`.

The table of these transitions (from, to, trigger) is in `scheduler/jobs.md`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from scheduler.models import Job
from scheduler.sqlfiles import bulk_rows, c_timestamptz, named_statements, sql_count, sql_rows

JOBS_SQL = Path(__file__).resolve().parent / "jobs.sql"


@cache
def job_queries() -> dict[str, str]:
    """The named statements of jobs.sql, read once per process."""
    return named_statements(JOBS_SQL)


def _rows(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    return sql_rows(job_queries()[name], params)


def _count(name: str, params: dict[str, Any]) -> int:
    return sql_count(job_queries()[name], params)


def _bulk_count(name: str, params: dict[str, Any]) -> int:
    """For statements that take arrays of a batch's rows: bound on the server (see bulk_rows)."""
    return bulk_rows(job_queries()[name], params)[1]


def db_now() -> datetime:
    """The database clock."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        value: datetime = cursor.fetchone()[0]
    return value


@dataclass(frozen=True)
class ClaimedRow:
    id: int
    job_id: int
    kind: str
    reason: str
    scheduled_for: datetime
    attempt: int
    due: datetime
    now: datetime
    # The job, locked with it (its columns came with the claim).
    job: Job = field(compare=False, repr=False)


def shard_of(job_id: int, shards: int) -> int:
    """The shard of a job's rows: what the claim's `(hashint8(job_id) & 2147483647) % shards`
    computes, asked of the database (PostgreSQL's hash is its own). A read."""
    ((shard,),) = sql_rows(
        "SELECT (hashint8(%(job_id)s::bigint) & 2147483647) %% %(shards)s",
        {"job_id": job_id, "shards": shards},
    )
    return int(shard)


# The claim's columns before the job's: the row's seven, now, the count locked (the last).
CLAIM_HEAD = 9


@dataclass(frozen=True)
class Claimed:
    """A claim's rows (each with its job), and how many rows it locked: more than `rows` when
    some rows' jobs were held by another (those rows stay as they were, due)."""

    rows: list[ClaimedRow]
    locked: int


def scheduled_claim_due(*, limit: int, held: Sequence[int] = (0,), shards: int = 1) -> Claimed:
    """Lock up to `limit` due ScheduledJob rows of the shards `held` (of `shards`) and their jobs
    (SKIP LOCKED), oldest due first; each with its job (built from the columns the claim read)."""
    params: dict[str, Any] = {"limit": limit, "held": list(held), "shards": shards}
    with connection.cursor() as cursor:
        c_timestamptz(cursor.cursor)  # nine timestamps a row: psycopg's C loader, not Django's
        cursor.execute(job_queries()["scheduled_claim_due"], params)
        job_of = _job_loader(tuple(d[0] for d in cursor.description[CLAIM_HEAD:]))
        rows = cursor.fetchall()
    return Claimed([_claimed(row, job_of(row)) for row in rows], int(rows[0][CLAIM_HEAD - 1]) if rows else 0)


def _claimed(row: Sequence[Any], job: Job) -> ClaimedRow:
    id_, job_id, kind, reason, scheduled_for, attempt, due, now = row[:8]
    return ClaimedRow(id_, job_id, kind, reason, scheduled_for, attempt, due, now, job=job)


@cache
def _job_loader(columns: tuple[str, ...]) -> Callable[[Sequence[Any]], Job]:
    """A claimed row (CLAIM_HEAD columns, then `j.*` as `columns`) -> its Job, each value
    through its field's database converters as a queryset's would be (the JSON input arrives as
    text); only the fields that have converters pay for them. Once per process and column list."""
    fields = Job._meta.concrete_fields
    where = {column: CLAIM_HEAD + index for index, column in enumerate(columns)}
    take = [where[str(f.column)] for f in fields]
    names = [f.attname for f in fields]
    converting = []
    for index, f in enumerate(fields):
        col = f.get_col(Job._meta.db_table)
        convert = connection.ops.get_db_converters(col) + f.get_db_converters(connection)
        if convert:
            converting.append((index, col, convert))
    alias = connection.alias
    # Model.__init__ sets each field by setattr and sends pre_init / post_init: a fifth of the
    # claim's Python at 10 us a job (bench/README.md, "Issue 20, fourth session"). With no
    # receiver of those signals for Job, the instance is what from_db would build - its fields
    # in __dict__, a ModelState not adding, of this database - set up directly.
    direct = not (pre_init.has_listeners(Job) or post_init.has_listeners(Job))

    def job_of(row: Sequence[Any]) -> Job:
        values = [row[i] for i in take]
        for index, col, convert in converting:
            value = values[index]
            for c in convert:
                value = c(value, col, connection)
            values[index] = value
        if not direct:
            return Job.from_db(alias, names, values)
        job = Job.__new__(Job)
        job.__dict__.update(zip(names, values, strict=True))
        state = job._state = ModelState()
        state.adding, state.db = False, alias
        return job

    return job_of


def shards_ensure(*, shards: int) -> None:
    """Not a transition: the lease rows of shards 0 .. shards-1 exist. Once a tick (a statement
    that finds them all and writes nothing): a cache per process would outlive a rollback."""
    _count("shards_ensure", {"shards": shards})


def shard_lease_take(
    *, holder: str, shards: int, lease: float, skip: Sequence[int] = (), take: int = 1
) -> list[int]:
    """Free -> held by `holder` for `lease` seconds: of the free shards not in `skip` with a row
    due now, the `take` least recently ticked (fewer, or none, when fewer are free)."""
    params = {"holder": holder, "shards": shards, "lease": lease, "skip": list(skip), "take": take}
    return sorted(int(shard) for (shard,) in _rows("shard_lease_take", params))


def shard_lease_renew(*, held: Sequence[int], holder: str, lease: float) -> bool:
    """Held -> held `lease` seconds from now; False when a lease of `held` had ended (maybe taken)."""
    return _count("shard_lease_renew", {"held": list(held), "holder": holder, "lease": lease}) == len(held)


def shard_lease_release(*, held: Sequence[int], holder: str) -> int:
    """Held -> free, ticked now. Returns how many were still this holder's."""
    return _count("shard_lease_release", {"held": list(held), "holder": holder})


def shards_free_due(*, shards: int, skip: Sequence[int] = ()) -> int:
    """Not a transition: free shards with a row due now. A read."""
    ((n,),) = _rows("shards_free_due", {"shards": shards, "skip": list(skip)})
    return int(n)


def hot_tables_analyze() -> None:
    """Not a transition: ANALYZE of the tables a burst of firings changes (jobs.sql), waiting at
    most a second for their lock (then a DatabaseError: a VACUUM or ANALYZE is refreshing
    them). In a transaction of its own, or a savepoint of the caller's."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL lock_timeout = '1s'")
        try:
            cursor.execute(job_queries()["hot_tables_analyze"])
        finally:
            cursor.execute("SET LOCAL lock_timeout TO DEFAULT")


def scheduled_next_due() -> tuple[datetime | None, datetime]:
    """(when the next row comes due after now, or None; now), on the database clock. A read."""
    ((due, now),) = _rows("scheduled_next_due", {})
    return due, now


def firing_context(*, job_ids: Sequence[int], buffer_reasons: Sequence[str]) -> list[tuple[Any, ...]]:
    """Not a transition: the read a batch's decisions need, under the claim's locks - rows
    (True, job id, run id, state) for each unfinished run and (False, job id, None, None) for
    each job whose buffer slot is taken. One statement, bound on the server."""
    if not job_ids:
        return []
    rows, _ = bulk_rows(
        job_queries()["firing_context"], {"job_ids": list(job_ids), "reasons": list(buffer_reasons)}
    )
    return rows


def scheduled_next_advance(*, moves: Sequence[tuple[int, datetime, datetime, datetime]]) -> int:
    """(id, old occurrence, new occurrence, due) per next row; returns the rows moved."""
    if not moves:
        return 0
    return _bulk_count(
        "scheduled_next_advance",
        {
            "ids": [m[0] for m in moves],
            "old_for": [m[1] for m in moves],
            "new_for": [m[2] for m in moves],
            "due": [m[3] for m in moves],
        },
    )


def scheduled_delete(*, ids: Sequence[int]) -> int:
    return _count("scheduled_delete", {"ids": list(ids)}) if ids else 0


def scheduled_park(*, ids: Sequence[int]) -> int:
    return _count("scheduled_park", {"ids": list(ids)}) if ids else 0


def scheduled_defer(*, ids: Sequence[int], seconds: float) -> int:
    return _count("scheduled_defer", {"ids": list(ids), "seconds": float(seconds)}) if ids else 0


def scheduled_unpark_oldest(*, job_ids: Sequence[int]) -> int:
    return _count("scheduled_unpark_oldest", {"job_ids": list(job_ids)}) if job_ids else 0


def scheduled_unpark_all(*, job_id: int) -> int:
    return _count("scheduled_unpark_all", {"job_id": job_id})


def scheduled_park_all(*, job_id: int) -> int:
    """The job's next row deleted (returns 1 if it had one), its other rows parked."""
    return _count("scheduled_park_all", {"job_id": job_id})


def job_firings_add(*, counts: dict[int, int]) -> int:
    if not counts:
        return 0
    return _bulk_count("job_firings_add", {"ids": list(counts), "counts": list(counts.values())})


def job_finish(*, ids: Sequence[int]) -> int:
    return _count("job_finish", {"ids": list(ids)}) if ids else 0


def job_disable(*, job_id: int, note: str, actor: str) -> bool:
    """Enabled -> paused, and its operator history row (`actor`, the note)."""
    return _count("job_pause", {"job_id": job_id, "note": note, "actor": actor}) == 1


def job_enable(*, job_id: int, actor: str) -> bool:
    """Paused -> enabled, and its operator history row (`actor`)."""
    return _count("job_resume", {"job_id": job_id, "actor": actor}) == 1


def job_edit_record(*, job_id: int, actor: str, changed: Sequence[str]) -> int:
    """The operator history row of an edit: who, and which fields."""
    return _count("job_edit_record", {"job_id": job_id, "actor": actor, "changed": list(changed)})


@dataclass(frozen=True)
class EndedRun:
    run_id: Any
    job_id: int
    state: str
    scheduled_for: datetime | None
    attempt: int
    finished_at: datetime | None
    error: str
    now: datetime


def job_runs_mark_settled(*, limit: int) -> list[EndedRun]:
    """Mark up to `limit` ended job runs settled (SKIP LOCKED on the run and its job)."""
    return [EndedRun(*row) for row in _rows("job_runs_mark_settled", {"limit": limit})]


def job_history_open(*, runs: Sequence[tuple[Any, str]], worker: str) -> int:
    """-> the "started" job history row of each (run id, why it started) a batch has just
    written, open until the settle closes it (`job_history_close`). One statement."""
    if not runs:
        return 0
    return _bulk_count(
        "job_history_open",
        {
            "run_ids": [run_id for run_id, _ in runs],
            "reasons": [reason for _, reason in runs],
            "worker": worker,
        },
    )


def job_history_close(*, run_ids: Sequence[Any]) -> int:
    if not run_ids:
        return 0
    return _count("job_history_close", {"run_ids": [str(r) for r in run_ids]})


@dataclass(frozen=True)
class HistoryRow:
    """A job history row a batch decided: skipped, buffered, or failed to start."""

    job_id: int
    status: str
    scheduled_for: datetime
    retry_count: int
    detail: dict[str, Any]
    error: str = ""


def job_history_record(*, rows: Sequence[HistoryRow], worker: str, at: datetime) -> int:
    """Not a transition: a batch's skipped, buffered and failed-to-start history rows, written
    by one statement (bound on the server). With `job_history_open`, `job_history_close` and the
    job operator rows of jobs.sql (`job_disable`, `job_enable`, `job_edit_record`), the only
    writers of a job's history (tests/scheduler/test_transitions_table.py checks that no other
    statement or model write does)."""
    if not rows:
        return 0
    return _bulk_count(
        "job_history_record",
        {
            "job_ids": [r.job_id for r in rows],
            "statuses": [r.status for r in rows],
            "fors": [r.scheduled_for for r in rows],
            "retries": [r.retry_count for r in rows],
            "errors": [r.error for r in rows],
            "details": [json.dumps(r.detail) for r in rows],
            "worker": worker,
            "at": at,
        },
    )


# -- dependencies between jobs (issue 30; scheduler/jobs.md, "Dependencies") ----------------


@dataclass(frozen=True)
class Edge:
    id: int
    parent_id: int
    child_id: int
    condition: str
    # Every parent of the child (its gate is complete when all have arrived).
    parents: tuple[int, ...]
    parent_name: str = ""


def dependency_edges_from(*, parent_ids: Sequence[int]) -> list[Edge]:
    """Not a transition: the edges out of `parent_ids`, each with all its child's parents. A read."""
    if not parent_ids:
        return []
    rows = _rows("dependency_edges_from", {"parent_ids": list(parent_ids)})
    return [
        Edge(int(i), int(p), int(c), str(cond), tuple(int(x) for x in ps), str(name))
        for i, p, c, cond, ps, name in rows
    ]


def job_runs_start_reason(*, run_ids: Sequence[Any]) -> dict[Any, str]:
    """Not a transition: why each run started (its job history row's reason). A read."""
    if not run_ids:
        return {}
    return dict(_rows("job_runs_start_reason", {"run_ids": [str(r) for r in run_ids]}))


def dependency_children_share(*, ids: Sequence[int]) -> int:
    """Not a transition: lock the children FOR KEY SHARE, in id order, before their gates."""
    return len(_rows("dependency_children_share", {"ids": sorted(set(ids))})) if ids else 0


@dataclass(frozen=True)
class Gate:
    child_id: int
    logical_time: datetime
    arrived: frozenset[int]
    blocked: str
    fired_at: datetime | None


def dependency_gates_arrive(*, arrivals: Sequence[tuple[int, datetime, Sequence[int], str]]) -> list[Gate]:
    """Absent/open -> open or blocked: (child, logical time, parents arrived, why blocked or "")
    per gate, at most one per (child, time); returns each gate as it now is, locked until commit."""
    if not arrivals:
        return []
    rows, _ = bulk_rows(
        job_queries()["dependency_gates_arrive"],
        {
            "child_ids": [a[0] for a in arrivals],
            "times": [a[1] for a in arrivals],
            "arrived": [",".join(str(p) for p in a[2]) for a in arrivals],
            "blocked": [a[3] for a in arrivals],
        },
    )
    return [Gate(int(c), t, frozenset(int(x) for x in arr), str(b), f) for c, t, arr, b, f in rows]


def dependency_gates_fire(*, gates: Sequence[tuple[int, datetime]]) -> list[tuple[int, datetime]]:
    """Open and complete -> fired, each child's queued row for its logical time written once.
    Returns (child, time) of each queued row written."""
    if not gates:
        return []
    rows, _ = bulk_rows(
        job_queries()["dependency_gates_fire"],
        {"child_ids": [g[0] for g in gates], "times": [g[1] for g in gates]},
    )
    return [(int(j), t) for j, t in rows]


def dependency_edges_record(*, outcomes: Sequence[tuple[int, str, datetime, bool]]) -> int:
    """Not a transition: (edge, outcome, logical time, matched) - each edge's last outcome."""
    if not outcomes:
        return 0
    return _bulk_count(
        "dependency_edges_record",
        {
            "ids": [o[0] for o in outcomes],
            "outcomes": [o[1] for o in outcomes],
            "times": [o[2] for o in outcomes],
            "matched": [o[3] for o in outcomes],
        },
    )


def dependency_parents_busy() -> bool:
    """Not a transition: a job with children has a run not settled yet. A read."""
    ((busy,),) = _rows("dependency_parents_busy", {})
    return bool(busy)

"""The engine's state machine: every transition of a step and of a run, one named function each.

A transition is one conditional statement (or one PostgreSQL function, for the hot ones) whose
WHERE clause carries the state it leaves - and the lease, where there is one - so the rows it
touched are the concurrency check: two callers racing for the same row change it once. The SQL
lives in `scheduler/sql/` (`functions.sql`, installed by migrations; `queries.sql`, one named
statement per transition, loaded once); nothing here assembles SQL. Time is the database clock.

Transitions change rows and nothing else. What follows a transition - events to receivers,
alerts, compensation, a kick of the scheduler - is orchestration, in `scheduler/services/`.

The table of transitions (from, to, trigger, guard) is `scheduler/transitions.md`, beside this file.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import DatabaseError

SQL_DIR = Path(__file__).resolve().parent / "sql"
FUNCTIONS_FILE = SQL_DIR / "functions.sql"
QUERIES_FILE = SQL_DIR / "queries.sql"

# Raised by sas_step_succeed when the caller did not open a transaction for an observed run.
SQLSTATE_RUN_OBSERVED = "SAS01"

_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@cache
def queries() -> dict[str, str]:
    """The named statements of queries.sql, read once per process."""
    text = QUERIES_FILE.read_text()
    parts = _NAME.split(text)
    # parts: [preamble, name1, body1, name2, body2, ...]
    named = {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}
    return named


def install_functions(conn: BaseDatabaseWrapper | None = None) -> None:
    """CREATE OR REPLACE every function of functions.sql (migrations call this)."""
    with (conn or connection).cursor() as cursor:
        cursor.execute(FUNCTIONS_FILE.read_text())


def _json(value: Any) -> Any:
    # Django registers a jsonb loader that returns text (JSONField decodes it); decode here.
    return json.loads(value) if isinstance(value, str) else value


def _one(name: str, params: dict[str, Any]) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(queries()[name], params)
        row = cursor.fetchone()
    return None if row is None else row


def _scalar_json(name: str, params: dict[str, Any]) -> Any:
    row = _one(name, params)
    return _json(row[0]) if row else None


def _rows(name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(queries()[name], params)
        return list(cursor.fetchall()) if cursor.description else []


def _count(name: str, params: dict[str, Any]) -> int:
    with connection.cursor() as cursor:
        cursor.execute(queries()[name], params)
        return int(cursor.rowcount)


# ---------------------------------------------------------------------------------------------
# What transitions return
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A claimed step: what its agent needs (ids, fence, deadline, payload)."""

    step_id: int
    run_id: str
    name: str
    operation: str
    lease: str
    complete_by: datetime
    claimed_at: datetime
    idempotency_key: str
    payload: dict[str, Any]
    attempt: int
    failure_count: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Claim:
        return cls(
            step_id=int(data["step_id"]),
            run_id=str(data["run_id"]),
            name=data["name"],
            operation=data["operation"],
            lease=str(data["lease"]),
            complete_by=datetime.fromisoformat(data["complete_by"]),
            claimed_at=datetime.fromisoformat(data["claimed_at"]),
            idempotency_key=data["idempotency_key"],
            payload=data["payload"] or {},
            attempt=int(data["attempt"]),
            failure_count=int(data["failure_count"]),
        )

    def message(self) -> dict[str, Any]:
        """The agent request: ids, fence, deadline and payload - JSON only."""
        return {
            "step_id": self.step_id,
            "lease": self.lease,
            "complete_by": self.complete_by.isoformat(),
            "idempotency_key": self.idempotency_key,
            "payload": self.payload,
            "attempt": self.attempt,
        }


@dataclass
class Transitioned:
    """Claims to dispatch after commit, and events of observed runs (jsonb rows) to announce."""

    claims: list[Claim] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _transitioned(data: dict[str, Any]) -> Transitioned:
    return Transitioned(
        claims=[Claim.from_json(c) for c in data.get("claims") or []], events=list(data.get("events") or [])
    )


@dataclass
class Succeeded(Transitioned):
    accepted: bool = False
    run_id: str = ""
    operation: str = ""
    needs_payload: int | None = None


@dataclass(frozen=True)
class FailedStep:
    step_id: int
    run_id: str
    name: str
    failure_count: int
    kind: str = ""
    max_failures: int = 0
    error: str = ""
    delay: float = 0.0


@dataclass
class Failed:
    """What `step_fail` / `step_expire_due` did: steps retried after backoff, steps errored."""

    retried: list[FailedStep] = field(default_factory=list)
    errored: list[FailedStep] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _failed(data: dict[str, Any]) -> Failed:
    def steps(rows: list[dict[str, Any]]) -> list[FailedStep]:
        return [
            FailedStep(
                step_id=int(r["step_id"]),
                run_id=str(r["run_id"]),
                name=r["name"],
                failure_count=int(r["failure_count"]),
                kind=r.get("kind", ""),
                max_failures=int(r.get("max_failures", 0)),
                error=r.get("error", ""),
                delay=float(r.get("delay", 0.0)),
            )
            for r in rows
        ]

    return Failed(
        retried=steps(data.get("retried") or []),
        errored=steps(data.get("errored") or []),
        events=list(data.get("events") or []),
    )


class RunObserved(Exception):
    """sas_step_succeed refused to run outside a transaction for an observed run."""


# ---------------------------------------------------------------------------------------------
# Step transitions
# ---------------------------------------------------------------------------------------------


def step_claim(*, step_ids: Sequence[int], instance: str) -> Transitioned:
    """Pending -> Processing for these steps (those still Pending and due)."""
    return _transitioned(_scalar_json("step_claim", {"ids": list(step_ids), "instance": instance}))


def step_claim_due(
    *,
    instance: str,
    limit: int,
    operation: str | None = None,
    exclude_operations: Sequence[str] | None = None,
    run_id: uuid.UUID | str | None = None,
) -> Transitioned:
    """Pending -> Processing for up to `limit` due steps, in claim order, skipping locked rows."""
    return _transitioned(
        _scalar_json(
            "step_claim_due",
            {
                "instance": instance,
                "limit": limit,
                "operation": operation,
                "exclude": list(exclude_operations or []),
                "run_id": str(run_id) if run_id else None,
            },
        )
    )


def step_succeed(
    *, step_id: int, lease: str, result: Any, instance: str, claim_next: bool, observed_ok: bool
) -> Succeeded:
    """Processing -> Processed, and what follows it in the same round trip (see functions.sql).
    Raises RunObserved (nothing written) when the run is observed and `observed_ok` is False."""
    params = {
        "step_id": step_id,
        "lease": lease,
        "result": json.dumps(result),
        "instance": instance,
        "claim_next": claim_next,
        "observed_ok": observed_ok,
    }
    try:
        data = _scalar_json("step_succeed", params)
    except DatabaseError as exc:
        if getattr(getattr(exc, "__cause__", None), "sqlstate", None) == SQLSTATE_RUN_OBSERVED:
            raise RunObserved(str(exc)) from exc
        raise
    base = _transitioned(data)
    return Succeeded(
        claims=base.claims,
        events=base.events,
        accepted=data["outcome"] == "accepted",
        run_id=str(data.get("run_id") or ""),
        operation=data.get("operation") or "",
        needs_payload=data.get("needs_payload"),
    )


def step_fail(
    *,
    failures: Sequence[tuple[int, str, str]],
    cause: str,
    actor: str,
    history_kind: str,
    min_backoff: float = 0.0,
    require_live: bool = True,
) -> Failed:
    """Processing -> Pending after backoff, or Error at the step's failure limit, for each
    (step id, lease, error). `require_live`: only while complete_by has not passed (a reply)."""
    return _failed(
        _scalar_json(
            "step_fail",
            {
                "ids": [f[0] for f in failures],
                "leases": [f[1] for f in failures],
                "errors": [f[2] for f in failures],
                "cause": cause,
                "min_backoff": float(min_backoff),
                "actor": actor,
                "history_kind": history_kind,
                "require_live": require_live,
            },
        )
    )


def step_expire_due(*, batch: int, instance: str) -> Failed:
    """The supervisor's sweep: up to `batch` steps past complete_by, failed by `step_fail`."""
    return _failed(_scalar_json("step_expire_due", {"batch": batch, "instance": instance}))


def reply_ignored(*, step_id: int, lease: str, outcome: str, worker: str, error: str, result: Any) -> None:
    """A reply the fence refused: one late_reply history row; no state changes."""
    _one(
        "reply_ignored",
        {
            "step_id": step_id,
            "lease": lease,
            "outcome": outcome,
            "worker": worker,
            "error": error,
            "result": json.dumps(result),
        },
    )


def step_fail_permanent(*, step_id: int, lease: str, error: str) -> FailedStep | None:
    """Processing -> Error (permanent). None if the fence refused the reply."""
    row = _one("step_fail_permanent", {"step_id": step_id, "lease": lease, "error": error})
    if row is None:
        return None
    return FailedStep(
        step_id=row[0], run_id=str(row[1]), name=row[2], kind=row[3], failure_count=0, error=error
    )


def step_advance(*, step_id: int, payload: dict[str, Any]) -> bool:
    """Waiting -> Pending with its payload."""
    return _count("step_advance", {"step_id": step_id, "payload": json.dumps(payload)}) == 1


def step_cancel_unstarted(*, run_id: uuid.UUID | str) -> list[tuple[int, int]]:
    """Waiting | Pending -> Cancelled for the run's forward steps: (id, attempts) of each."""
    return [(r[0], r[1]) for r in _rows("step_cancel_unstarted", {"run_id": str(run_id)})]


def step_stop(*, run_id: uuid.UUID | str, reason: str) -> list[tuple[int, datetime]]:
    """Processing -> Cancelled for the run's forward steps in flight: (id, old complete_by)."""
    return [(r[0], r[1]) for r in _rows("step_stop", {"run_id": str(run_id), "reason": reason})]


def step_mark_compensating(*, step_ids: Sequence[int]) -> int:
    """Processed -> Compensating."""
    return _count("step_mark_compensating", {"ids": list(step_ids)})


def step_resume(*, run_id: uuid.UUID | str) -> list[tuple[int, str]]:
    """Error -> Pending (fresh failure budget) for the run's compensation steps."""
    return [(r[0], r[1]) for r in _rows("step_resume", {"run_id": str(run_id)})]


# ---------------------------------------------------------------------------------------------
# Run transitions (the others happen inside sas_step_claim and sas_step_succeed)
# ---------------------------------------------------------------------------------------------


def run_compensate(*, run_id: uuid.UUID | str, reason: str, cancel: bool) -> bool | None:
    """Pending | Running -> Compensating. Returns the run's cancel_requested, None if refused."""
    row = _one("run_compensate", {"run_id": str(run_id), "reason": reason, "cancel": cancel})
    return None if row is None else bool(row[0])


def run_finish_compensation(*, run_id: uuid.UUID | str) -> tuple[str, str] | None:
    """Compensating -> Compensated | Cancelled. (state, correlation id), or None if refused."""
    row = _one("run_finish_compensation", {"run_id": str(run_id)})
    return None if row is None else (row[0], row[1])


def run_fail(*, run_id: uuid.UUID | str, reason: str) -> bool:
    """Compensating -> Failed."""
    return _count("run_fail", {"run_id": str(run_id), "reason": reason}) == 1


def run_resume_compensation(*, run_id: uuid.UUID | str) -> bool:
    """Failed -> Compensating."""
    return _count("run_resume_compensation", {"run_id": str(run_id)}) == 1

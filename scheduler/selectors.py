"""Read-only queries for the scheduler's admin: run lists with their counts, overdue steps; and
for users (scoped by the user): a long run's progress.

Nothing here writes. Every count that the admin shows per row is a correlated subquery, so a
changelist page costs the same number of queries whatever its size, and the subqueries run only
for the rows on the page (PostgreSQL evaluates select-list subqueries after LIMIT).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Now

from sasproject.database import session_connection

from .models import Checkpoint, HeartbeatStatus, Run, Step, TaskExecutionHistory
from .outputs import steps_outputs
from .transitions import engine_queries
from .workflows import get_workflow, registered_workflows

# Forward steps whose work was done (and maybe undone since): they count as progress.
_DONE_STATES = (Step.State.PROCESSED, Step.State.COMPENSATING, Step.State.COMPENSATED)
# A forward step's columns the progress reads: its state (done or not) and its output.
_PROGRESS_STEP_COLUMNS = ("id", "run_id", "name", "seq", "kind", "process_state", "result")


def count_per_run(queryset: QuerySet[Any]) -> Coalesce:
    """`(SELECT count(*) ... )` correlated on `run_id = OuterRef("pk")`, 0 when there is none."""
    counted = queryset.order_by().values("run_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


@dataclass(frozen=True)
class HeldRequest:
    """What an agent may act on for one step: its operation's payload, idempotency key and
    deadlines as the engine stored them at the claim (issue 26, "agents trust only the state
    store"). `start_by` is None once the attempt was seen started; `heartbeat` only for a
    heartbeat step (its window, seconds)."""

    payload: dict[str, Any]
    idempotency_key: str
    complete_by: datetime
    start_by: datetime | None
    timeout: float
    attempt: int
    heartbeat: float | None

    def request(self) -> dict[str, Any]:
        """The agent request's fields these replace, in the message's own shape (JSON types)."""
        fields: dict[str, Any] = {
            "payload": self.payload,
            "idempotency_key": self.idempotency_key,
            "complete_by": self.complete_by.isoformat(),
            "start_by": None if self.start_by is None else self.start_by.isoformat(),
            "timeout": self.timeout,
            "attempt": self.attempt,
        }
        if self.heartbeat:
            fields["heartbeat"] = self.heartbeat
        return fields


def step_request_held(*, step_id: int, lease: str, operation: str) -> HeldRequest | None:
    """The request of the step `step_id` while it is Processing under `lease` for `operation`,
    or None: no such step, another lease (a forged or replayed one, or the step was taken back),
    another state (done, cancelled, its run deleted) or another operation (a real lease sent to
    another agent). One primary-key lookup (queries.sql `step_request_held`, run as a static
    statement: the ORM's query building cost six times the query on a loaded machine, and every
    agent attempt asks this before its remote call)."""
    with connection.cursor() as cursor:
        cursor.execute(
            engine_queries()["step_request_held"],
            {"step_id": step_id, "lease": lease, "operation": operation},
        )
        row = cursor.fetchone()
    if row is None:
        return None
    payload, key, complete_by, start_by, timeout, attempts, heartbeat = row
    if complete_by is None:
        return None  # a Processing step always has one (its claim set it): never act without
    if isinstance(payload, str):  # Django's jsonb loader hands text to JSONField (transitions._json)
        payload = json.loads(payload)
    return HeldRequest(
        payload=payload or {},
        idempotency_key=key,
        complete_by=complete_by,
        start_by=start_by,
        timeout=float(timeout),
        attempt=int(attempts),
        heartbeat=float(heartbeat) if heartbeat else None,
    )


def run_list_annotated(*, queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """Runs with `steps_total` and `steps_done` (forward steps) per row, and their owner joined
    in (`ops.selectors.run_list_with_alerts` adds the open alerts)."""
    qs = Run.objects.all() if queryset is None else queryset
    forward = Step.objects.filter(run_id=OuterRef("pk"), kind=Step.Kind.FORWARD)
    return qs.select_related("owner").annotate(
        steps_total=count_per_run(forward),
        steps_done=count_per_run(forward.filter(process_state__in=_DONE_STATES)),
    )


def run_has_overdue_step_q() -> Q:
    """Runs with a step still Processing past its complete-by (the supervisor is behind or down)."""
    return Q(Exists(step_overdue_queryset().filter(run_id=OuterRef("pk"))))


def step_overdue_queryset() -> QuerySet[Step]:
    """Processing steps whose complete-by has passed (served by step_processing_deadline_idx)."""
    return Step.objects.filter(process_state=Step.State.PROCESSING, complete_by__lt=Now())


def steps_overdue_count() -> int:
    """How many steps are Processing past their deadline. Normally 0: the supervisor returns
    each to Pending (or Error) within one sweep interval."""
    return step_overdue_queryset().count()


def run_state_counts() -> dict[str, int]:
    """Runs per state, every state present (0 when none), in the order of `Run.State`."""
    rows = Run.objects.order_by().values_list("state").annotate(n=Count("pk"))
    found = {state: n for state, n in rows}
    return {state: found.get(state, 0) for state in Run.State.values}


def workflow_names() -> list[str]:
    """Registered workflows (from code, not a DISTINCT over the runs table)."""
    return registered_workflows()


def workflow_step_names() -> list[str]:
    """Every step name (forward and compensation) of every registered workflow, sorted."""
    names: set[str] = set()
    for workflow in registered_workflows():
        for step in get_workflow(workflow).steps:
            names.add(step.name)
            if step.compensation is not None:
                names.add(step.compensation.name)
    return sorted(names)


# ---------------------------------------------------------------------------------------------
# Long steps: a run's progress (paginated steps' checkpoints, heartbeat steps' HeartbeatStatus)
# ---------------------------------------------------------------------------------------------


def run_progress_of(run: Run) -> dict[str, Any]:
    """What a long run has done and how fast: forward steps done / total; for its paginated
    steps (summed), pages and rows done / total, rows per second since the first page began and
    the estimated seconds left; for its heartbeat steps, their HeartbeatStatus rows; its error and
    its steps' outputs (scheduler/outputs.py). Three indexed queries by run: its forward steps
    (counted and their outputs taken in Python: a run has a handful), checkpoints, statuses (with
    the database clock's now). Unscoped: callers that serve a user go through `run_progress`."""
    forward = list(
        Step.objects.filter(run_id=run.pk, kind=Step.Kind.FORWARD)
        .only(*_PROGRESS_STEP_COLUMNS)
        .order_by("seq")
    )
    steps_total = len(forward)
    steps_done = sum(1 for step in forward if step.process_state in _DONE_STATES)
    terminal = run.state in Run.TERMINAL_STATES
    paged = _paged_progress(run_id=run.pk, terminal=terminal)
    heartbeats = [
        {
            "step": status.step.name,
            "status": status.status,
            "status_label": status.get_status_display(),
            "heartbeats": status.heartbeats,
            "last_heartbeat_at": status.last_heartbeat_at.isoformat() if status.last_heartbeat_at else None,
            "seconds_since_heartbeat": (
                round((status.db_now - status.last_heartbeat_at).total_seconds(), 1)
                if status.last_heartbeat_at
                else None
            ),
            "worker": status.worker,
            "complete_by": status.step.complete_by.isoformat() if status.step.complete_by else None,
        }
        for status in HeartbeatStatus.objects.filter(run_id=run.pk)
        .select_related("step")
        .annotate(db_now=Now())
        .order_by("step_id")
    ]
    return {
        "run_id": str(run.pk),
        "workflow": run.workflow,
        "state": run.state,
        "state_label": run.get_state_display(),
        "terminal": terminal,
        "steps_done": steps_done,
        "steps_total": steps_total,
        "paged": paged,
        "heartbeats": heartbeats,
        # Its outcome (issue 28): why it failed, and what its steps returned (excerpts).
        "error": run.error,
        "outputs": steps_outputs(run=run, steps=forward),
    }


def _paged_progress(*, run_id: Any, terminal: bool) -> dict[str, Any] | None:
    """A run's paginated steps, summed: pages and rows done / total, rows per second since the
    first page began, the estimated seconds left. None when it has none. One query."""
    checkpoints = list(Checkpoint.objects.filter(run_id=run_id).order_by("step_id"))
    if not checkpoints:
        return None
    rows_done = sum(c.rows_done for c in checkpoints)
    totals = [c.total for c in checkpoints]
    rows_total = None if any(t is None for t in totals) else sum(t or 0 for t in totals)
    pages_done = sum(c.pages_done for c in checkpoints)
    pages_total = (
        None if rows_total is None else sum(-(-(c.total or 0) // c.page_size) or 1 for c in checkpoints)
    )
    completed = all(c.completed for c in checkpoints)
    began = [c.started_at for c in checkpoints if c.started_at is not None]
    last = max((c.updated_at for c in checkpoints if c.started_at is not None), default=None)
    elapsed = (last - min(began)).total_seconds() if began and last else 0.0
    rate = rows_done / elapsed if elapsed > 0 and rows_done else None
    eta: float | None
    if completed:
        percent, eta = 100.0, 0.0
    elif rows_total:
        percent = min(100.0, 100.0 * rows_done / rows_total)
        eta = (rows_total - rows_done) / rate if rate else None
    else:
        percent, eta = 0.0, None
    if terminal and not completed:
        eta = None
    return {
        "pages_done": pages_done,
        "pages_total": pages_total,
        "rows_done": rows_done,
        "rows_total": rows_total,
        "page_size": checkpoints[0].page_size,
        "percent": round(percent, 1),
        "rows_per_second": None if rate is None else round(rate, 1),
        "eta_seconds": None if eta is None else round(eta, 1),
        "completed": completed,
        "started_at": min(began).isoformat() if began else None,
        "updated_at": last.isoformat() if last else None,
    }


def run_progress(*, user: Any, run_id: uuid.UUID | str) -> dict[str, Any] | None:
    """`run_progress_of` for a run `user` owns; None when there is no such run for this user
    (another user's run is simply not found - a 404 that does not confirm it exists)."""
    if not getattr(user, "is_authenticated", False):
        return None
    run = Run.objects.filter(pk=run_id, owner_id=user.pk).first()
    return None if run is None else run_progress_of(run)


def history_of_owner(*, owner_id: int, chunk_size: int = 2000) -> Iterator[TaskExecutionHistory]:
    """Every execution-history row of the runs `owner_id` owns, oldest first, streamed in
    chunks (a server-side cursor): the input of a user's history export. The cursor outlives
    transactions (WITH HOLD, in autocommit), so behind a transaction-mode pooler it is read on
    the direct connection (sasproject/database.py), where it streams as without one."""
    return (
        TaskExecutionHistory.objects.using(session_connection().alias)
        .filter(run__owner_id=owner_id)
        .select_related("step", "run")
        .order_by("started_at", "id")
        .iterator(chunk_size=chunk_size)
    )

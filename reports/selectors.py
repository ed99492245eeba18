"""Reads for the reports: one user's figures over a window, and one run's timeline.

Every read that serves a person takes the viewer and scopes by it (`report_subject`): a user
sees their own report; staff see anyone's. Nothing here writes.

The report's SQL is in `reports/sql/report.sql` (its header defines every figure); it starts from
the user's runs in the window (run_owner_created_idx), so it reads that user's rows only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db import connection, transaction
from django.db.models import Min

from scheduler.models import ScheduledJob
from scheduler.permissions import staff_may
from scheduler.sqlfiles import named_statements

from .windows import Window

User = AbstractBaseUser | AnonymousUser

SQL_FILE = Path(__file__).resolve().parent / "sql" / "report.sql"

# A run's outcome, in the order the charts stack them (the colours are in reports/svg.py).
OUTCOMES = ("completed", "compensated", "failed", "cancelled", "in_progress")
OUTCOME_LABELS = {
    "completed": "Completed",
    # Undone: some work of the run was undone. Failed: it failed with nothing to undo, or
    # undoing it needs an operator (scheduler/outcomes.py; issue 28).
    "compensated": "Undone (compensated)",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "in_progress": "In progress",
}
MISSED_KINDS = ("attempt_start", "attempt_complete", "step_close", "run")
# Each kind of missed deadline as the page names it: (short, in the tile's breakdown; long, on
# hover). The tile's figure is the sum of these kinds (`Figures.missed_deadlines`), and its
# breakdown lists every kind, so the two always add up.
MISSED_LABELS = {
    "attempt_start": ("not started", "Attempts not started by their start-by"),
    "attempt_complete": ("timed out", "Attempts with no reply by their complete-by"),
    "step_close": ("steps", "Steps past their whole-step deadline"),
    "run": ("runs", "Runs past their deadline"),
}


@cache
def statements() -> dict[str, str]:
    """The named statements of report.sql, read once per process."""
    return named_statements(SQL_FILE)


def _fetch(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows of one statement as dicts. The caller holds a transaction with `_report_settings`."""
    with connection.cursor() as cursor:
        cursor.execute(statements()[name], params)
        columns = [c.name for c in cursor.description or []]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _report_settings() -> None:
    """For the report's statements only (SET LOCAL: until the transaction ends): no JIT - a
    heavy user's week is estimated costly enough to compile, which alone took half a second
    (bench/README.md) -, and no parallel workers, so a report never takes the cores the engine's
    own statements need."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")


def report_usernames(*, viewer: User, limit: int = 500) -> list[str]:
    """Usernames staff with the staff-work permission can pick from (the page's suggestions);
    nobody else picks."""
    if not staff_may(viewer):
        return []
    field = get_user_model().USERNAME_FIELD
    return list(get_user_model().objects.order_by(field).values_list(field, flat=True)[:limit])


class ReportNotFound(Exception):
    """No such user, or not one the viewer may see (the same answer: a 404 that confirms
    nothing)."""


def report_subject(*, viewer: User, username: str | None) -> Any:
    """Whose report `viewer` asked for: their own without `username`; staff holding the
    staff-work permission (scheduler/permissions.py) may name anyone.
    Anyone else naming another user gets ReportNotFound, as for a user that does not exist."""
    if not viewer.is_authenticated:
        raise ReportNotFound("sign in first")
    username = (username or "").strip()
    if not username or username == viewer.get_username():
        return viewer
    # A NUL cannot be in a username, and PostgreSQL refuses it in a query (a 500, issue 18).
    if not staff_may(viewer) or "\x00" in username:
        raise ReportNotFound(f"no user {username!r}")
    try:
        return get_user_model().objects.get(**{get_user_model().USERNAME_FIELD: username})
    except get_user_model().DoesNotExist:
        raise ReportNotFound(f"no user {username!r}") from None


# ---------------------------------------------------------------------------------------------
# The figures
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """One row of the report (a job, a workflow, or everything). Durations in seconds."""

    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    finished: int = 0
    p50: float | None = None
    p95: float | None = None
    retries: int = 0
    missed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MISSED_KINDS, 0))

    @property
    def success_rate(self) -> float | None:
        counted = self.outcomes["completed"] + self.outcomes["compensated"] + self.outcomes["failed"]
        return self.outcomes["completed"] / counted if counted else None

    @property
    def missed_deadlines(self) -> int:
        """Every missed deadline, of every kind: the sum of `missed_breakdown`."""
        return sum(count for _, _, _, count in self.missed_breakdown)

    @property
    def missed_breakdown(self) -> list[tuple[str, str, str, int]]:
        """(kind, short label, long label, count) of every kind of MISSED_KINDS, in order."""
        return [(kind, *MISSED_LABELS[kind], self.missed[kind]) for kind in MISSED_KINDS]

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Figures:
        return cls(
            runs=int(row["runs"]),
            outcomes={name: int(row[name]) for name in OUTCOMES},
            finished=int(row["finished"]),
            p50=row["p50"],
            p95=row["p95"],
            retries=int(row["retries"]),
            missed={
                "attempt_start": int(row["missed_start"]),
                "attempt_complete": int(row["missed_complete"]),
                "step_close": int(row["missed_close"]),
                "run": int(row["missed_run"]),
            },
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "outcomes": dict(self.outcomes),
            "success_rate": self.success_rate,
            "finished": self.finished,
            "duration_p50_seconds": self.p50,
            "duration_p95_seconds": self.p95,
            "retries": self.retries,
            "missed_deadlines": self.missed_deadlines,
            "missed_deadlines_by_kind": dict(self.missed),
        }


@dataclass(frozen=True)
class JobInfo:
    id: int
    name: str
    workflow: str
    schedule: str  # the cron expression, or "" for a one-off job
    timezone: str
    enabled: bool
    last_run_id: str | None
    last_run_at: datetime | None
    last_run_state: str | None
    next_run_at: datetime | None


@dataclass(frozen=True)
class ReportRow:
    """A job's runs, or the runs of one workflow that no job produced (orders placed by hand)."""

    label: str
    workflow: str
    figures: Figures
    job: JobInfo | None = None

    def as_dict(self) -> dict[str, Any]:
        job = self.job
        return {
            "label": self.label,
            "workflow": self.workflow,
            "job": None
            if job is None
            else {
                "id": job.id,
                "name": job.name,
                "schedule": job.schedule or None,
                "timezone": job.timezone,
                "enabled": job.enabled,
                "last_run": None
                if job.last_run_id is None
                else {"id": job.last_run_id, "at": job.last_run_at, "state": job.last_run_state},
                "next_run_at": job.next_run_at,
            },
            **self.figures.as_dict(),
        }


@dataclass(frozen=True)
class Bucket:
    start: datetime  # aware, in the report's time zone
    end: datetime
    outcomes: dict[str, int]
    finished: int
    p50: float | None
    p95: float | None

    @property
    def runs(self) -> int:
        return sum(self.outcomes.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "runs": self.runs,
            "outcomes": dict(self.outcomes),
            "finished": self.finished,
            "duration_p50_seconds": self.p50,
            "duration_p95_seconds": self.p95,
        }


@dataclass(frozen=True)
class Report:
    user_id: int
    username: str
    window: Window
    generated_at: datetime
    total: Figures
    rows: list[ReportRow]
    buckets: list[Bucket]

    def as_dict(self) -> dict[str, Any]:
        return {
            "user": {"id": self.user_id, "username": self.username},
            "window": {
                "name": self.window.name,
                "start": self.window.start,
                "end": self.window.end,
                "tz": self.window.tz_name,
                "bucket_seconds": int(self.window.bucket.total_seconds()),
            },
            "generated_at": self.generated_at,
            "total": self.total.as_dict(),
            "rows": [row.as_dict() for row in self.rows],
            "buckets": [bucket.as_dict() for bucket in self.buckets],
        }


def job_next_runs(*, jobs: Iterable[dict[str, Any]]) -> dict[int, datetime | None]:
    """When each job runs next: its earliest due ScheduledJob row (the dispatcher's own answer:
    the next occurrence, a queued catch-up or a retry; a paused, finished or parked job has none).
    One query on the rows' job index."""
    ids = [job["id"] for job in jobs]
    rows = (
        ScheduledJob.objects.filter(job_id__in=ids, next_execution_at__isnull=False)
        .values("job_id")
        .annotate(at=Min("next_execution_at"))
    )
    found: dict[int, datetime | None] = dict.fromkeys(ids)
    found.update({row["job_id"]: row["at"] for row in rows})
    return found


def _workflow_label(workflow: str) -> str:
    return f"{workflow} runs (not from a job)"


def user_report(*, user: Any, window: Window, now: datetime) -> Report:
    """`user`'s report over `window` (the caller got `user` from `report_subject`). Three
    statements in one read transaction (one snapshot: the figures agree with each other), each
    reading only this user's rows through their indexes."""
    params = {"owner": user.pk, "start": window.start, "end": window.end, "now": now}
    with transaction.atomic():
        _report_settings()
        groups = _fetch("report_groups", params)
        jobs = _fetch("report_jobs", {"owner": user.pk})
        buckets = _fetch("report_buckets", {**params, "bucket": window.bucket, "tz": window.tz_name})

    total = Figures()
    per_job: dict[int, Figures] = {}
    rows: list[ReportRow] = []
    for row in groups:
        figures = Figures.from_row(row)
        if row["is_total"]:
            total = figures
        elif row["job_id"] is not None:
            per_job[int(row["job_id"])] = figures
        else:
            rows.append(
                ReportRow(label=_workflow_label(row["workflow"]), workflow=row["workflow"], figures=figures)
            )

    next_runs = job_next_runs(jobs=jobs)
    job_rows = [
        ReportRow(
            label=job["name"],
            workflow=job["workflow"],
            figures=per_job.get(job["id"], Figures()),
            job=JobInfo(
                id=job["id"],
                name=job["name"],
                workflow=job["workflow"],
                schedule=job["cron"],
                timezone=job["timezone"],
                enabled=job["enabled"],
                last_run_id=str(job["last_run_id"]) if job["last_run_id"] else None,
                last_run_at=job["last_run_at"],
                last_run_state=job["last_run_state"],
                next_run_at=next_runs.get(job["id"]),
            ),
        )
        for job in jobs
    ]
    return Report(
        user_id=user.pk,
        username=user.get_username(),
        window=window,
        generated_at=now,
        total=total,
        rows=job_rows + rows,
        buckets=_fill_buckets(window, buckets),
    )


def _fill_buckets(window: Window, rows: Sequence[dict[str, Any]]) -> list[Bucket]:
    """Every bucket of the window, empty ones included (a gap in the chart is a real zero)."""
    found = {row["bucket"]: row for row in rows}
    filled = []
    for start in window.bucket_starts():
        row = found.get(start)
        outcomes = {name: int(row[name]) if row else 0 for name in OUTCOMES}
        filled.append(
            Bucket(
                start=window.local(start),
                end=window.local(start + window.bucket),
                outcomes=outcomes,
                finished=int(row["finished"]) if row else 0,
                p50=row["p50"] if row else None,
                p95=row["p95"] if row else None,
            )
        )
    return filled

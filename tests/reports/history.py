"""A hand-built execution history: runs, steps and history rows with chosen times and outcomes,
written straight to the tables (the figures are checked against what is written here)."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.models import Job, Run, ScheduledJob, Step, TaskExecutionHistory

NOW = datetime(2026, 1, 5, 12, 0, 0, tzinfo=UTC)
_seq = itertools.count()
H = TaskExecutionHistory


def at(text: str) -> datetime:
    """'01-05 10:30:00' -> that moment of 2026 in UTC."""
    return datetime.strptime(
        f"2026-{text}", "%Y-%m-%d %H:%M:%S.%f" if "." in text else "%Y-%m-%d %H:%M:%S"
    ).replace(tzinfo=UTC)


def make_user(prefix: str) -> Any:
    """A user without a password (these tests sign in with force_login or a token): no
    password hashing, which costs ~0.3 s a user on a loaded 2-core machine."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create(username=f"{prefix}{next(_seq)}")


def make_run(
    owner: Any,
    *,
    created: datetime,
    state: str,
    seconds: float | None = None,
    job: Job | None = None,
    workflow: str = "order_fulfilment",
    deadline: datetime | None = None,
) -> Run:
    run = Run.objects.create(workflow=workflow, owner=owner, state=state, job=job, deadline=deadline)
    finished = created + timedelta(seconds=seconds) if seconds is not None else None
    Run.objects.filter(pk=run.pk).update(created_at=created, finished_at=finished)
    run.refresh_from_db()
    return run


def make_step(
    run: Run, name: str = "work", *, kind: str = "forward", seq: int = 0, state: str = "processed"
) -> Step:
    return Step.objects.create(
        run=run,
        name=name,
        kind=kind,
        seq=seq,
        operation=f"agents.test.{name}",
        process_state=state,
        idempotency_key=f"{run.pk}:{name}:{next(_seq)}",
    )


def attempt(
    step: Step, number: int, status: str, start: datetime, seconds: float | None = 0.5, **extra: Any
) -> TaskExecutionHistory:
    return H.objects.create(
        step=step,
        run=step.run,
        kind=H.Kind.ATTEMPT,
        status=status,
        lease=uuid.uuid4(),
        retry_count=number - 1,
        worker=extra.pop("worker", "sched-host:101"),
        error=extra.pop("error", ""),
        detail={"attempt": number},
        started_at=start,
        ended_at=start + timedelta(seconds=seconds) if seconds is not None else None,
    )


def decision(
    step: Step,
    *,
    kind: str,
    status: str,
    cause: str,
    when: datetime,
    failed: TaskExecutionHistory | None = None,
    give_up: str | None = None,
    backoff: float = 1.0,
    worker: str = "agent-host:202",
) -> TaskExecutionHistory:
    return H.objects.create(
        step=step,
        run=step.run,
        kind=kind,
        status=status,
        retry_count=1,
        worker=worker,
        detail={
            "cause": cause,
            "counted": cause not in ("deferred", "requeued"),
            "failed_lease": str(failed.lease) if failed else None,
            "give_up": give_up,
            "backoff_seconds": backoff if status == "retry_scheduled" else 0,
        },
        started_at=when,
        ended_at=when,
    )


def build_user_history(owner: Any) -> dict[str, Any]:
    """The scenario of tests/reports/test_figures.py (its docstring tabulates the figures)."""
    job = Job.objects.create(
        owner=owner, name="nightly", workflow="order_fulfilment", is_recurring=True, cron="30 9 * * *",
        timezone="Asia/Kolkata",
    )  # fmt: skip
    # Its next occurrence, as the dispatcher keeps it (09:30 in Kolkata the next day); the
    # one-off job has fired, so it has none.
    ScheduledJob.objects.create(
        job=job, kind="next", scheduled_for=datetime(2026, 1, 6, 4, 0, tzinfo=UTC),
        next_execution_at=datetime(2026, 1, 6, 4, 0, tzinfo=UTC),
    )  # fmt: skip
    Job.objects.create(owner=owner, name="one-off", workflow="order_fulfilment")

    # r1: job, completed in 10 s; its first attempt timed out, the supervisor recovered it.
    r1 = make_run(owner, created=at("01-05 10:00:00"), state="completed", seconds=10, job=job)
    s1 = make_step(r1)
    a1 = attempt(s1, 1, H.Status.TIMED_OUT, at("01-05 10:00:00.100"), 3)
    decision(s1, kind=H.Kind.SUPERVISOR, status=H.Status.RETRY_SCHEDULED, cause="timed_out",
             when=at("01-05 10:00:03.100"), failed=a1)  # fmt: skip
    attempt(s1, 2, H.Status.SUCCEEDED, at("01-05 10:00:05"), 1)

    # r2: job, compensated after 20 s: failed twice, then its whole-step deadline passed.
    r2 = make_run(owner, created=at("01-05 10:30:00"), state="compensated", seconds=20, job=job)
    s2 = make_step(r2, state="compensated")
    # Its step was undone: a compensation step of it reached processed (a run that undid
    # nothing reads failed: scheduler/outcomes.py).
    make_step(r2, "undo_work", kind="compensation", seq=1000, state="processed")
    b1 = attempt(s2, 1, H.Status.FAILED_TRANSIENT, at("01-05 10:30:00.100"), 1, error="HTTP 503")
    decision(s2, kind=H.Kind.SCHEDULER, status=H.Status.RETRY_SCHEDULED, cause="failed_transient",
             when=at("01-05 10:30:01.100"), failed=b1)  # fmt: skip
    b2 = attempt(s2, 2, H.Status.FAILED_TRANSIENT, at("01-05 10:30:02.200"), 1, error="HTTP 503")
    decision(s2, kind=H.Kind.SCHEDULER, status=H.Status.ERRORED, cause="failed_transient",
             when=at("01-05 10:30:03.200"), failed=b2, give_up="deadline")  # fmt: skip

    # r3: job, still running past its own deadline; its first attempt was not started in time.
    r3 = make_run(owner, created=at("01-05 11:59:59.999"), state="running", job=job,
                  deadline=at("01-05 11:59:59.999") + timedelta(microseconds=500))  # fmt: skip
    s3 = make_step(r3, state="pending")
    attempt(s3, 1, H.Status.REQUEUED, at("01-05 11:59:59.999"), 0.0001)
    attempt(s3, 2, H.Status.STARTED, at("01-05 11:59:59.999"), None)

    # Orders (no job): r4 exactly at the window's start (in), r5 exactly at its end (out),
    # r6 a second before its start (out).
    r4 = make_run(owner, created=at("01-04 12:00:00"), state="completed", seconds=5)
    attempt(make_step(r4), 1, H.Status.SUCCEEDED, at("01-04 12:00:00.100"), 4)
    make_run(owner, created=at("01-05 12:00:00"), state="completed", seconds=2)
    make_run(owner, created=at("01-04 11:59:59"), state="completed", seconds=2)
    r7 = make_run(owner, created=at("01-05 10:15:00"), state="completed", seconds=30)
    r8 = make_run(owner, created=at("01-05 10:45:00"), state="cancelled", seconds=1)
    r9 = make_run(owner, created=at("01-05 10:50:00"), state="failed", seconds=40)
    return {"job": job, "runs": [r1, r2, r3, r4, r7, r8, r9]}

"""The jobs dispatcher with real processes on committed data: killed between claim and commit,
two dispatchers at once against 1,000 jobs, "run now" hammered on a non-idempotent job, and
celery beat driving it end to end."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery import current_app
from django.contrib.auth import get_user_model
from django.db import connection
from django_celery_beat.models import PeriodicTask, PeriodicTasks

from ops.roles import OPERATOR_GROUP
from sastools.harness import REPO, wait_for
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.cron import cron_next
from scheduler.dispatcher.firing import jitter_offset
from scheduler.dispatcher.tick import PAUSE_MARKER
from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services import RunNotCancellable, job_create, job_run_now, jobs_dispatch, run_cancel
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow
from tests.roles import join_role

from .jobs_support import new_job

DISPATCHER_ROW = "sas: jobs dispatcher"


@pytest.fixture
def beat_dispatcher_off(live_db: None, engine_paused: None) -> Iterator[None]:
    """Beat's own dispatcher must not fire these jobs: the session engine, if a test of this
    process started it, is stopped for the test (`engine_paused`), and its beat row disabled
    for any other beat. `update_changed()`: django-celery-beat's DatabaseScheduler notices a
    change by that stamp, which a queryset update does not set."""
    PeriodicTask.objects.filter(name=DISPATCHER_ROW).update(enabled=False)
    PeriodicTasks.update_changed()
    yield
    PeriodicTask.objects.filter(name=DISPATCHER_ROW).update(enabled=True)
    PeriodicTasks.update_changed()


@pytest.fixture
def owner(live_db: None) -> Any:

    register_engine_workflow()
    user, _ = get_user_model().objects.get_or_create(username="jobs-live")
    return user


def test_dispatcher_killed_between_claim_and_commit__nothing_lost_nothing_doubled(
    beat_dispatcher_off, owner, start_worker, settings
):
    # One shard (the row locks are what this test is about; shards and their leases:
    # test_dispatcher_scaleout_live.py), with a short lease, for both dispatchers.
    settings.SAS = {**settings.SAS, "JOBS_DISPATCH_SHARDS": 1, "JOBS_DISPATCH_LEASE_SECONDS": 3.0}
    jobs = [new_job(owner, f"once-{i}", cron="") for i in range(5)]
    worker = start_worker(
        name="jobs-crash",
        queues="jobs-crash",
        concurrency=1,
        SAS_JOBS_TEST_PAUSE_AFTER_CLAIM="120",
        SAS_JOBS_DISPATCH_SHARDS="1",
        SAS_JOBS_DISPATCH_LEASE_SECONDS="3",
        SAS_JOBS_DISPATCH_QUEUE="jobs-crash",
    )
    current_app.send_task("scheduler.jobs_dispatch", queue="jobs-crash")
    wait_for(lambda: PAUSE_MARKER in worker.log(), timeout=30, what="the dispatcher to claim and pause")

    # It holds the rows: another dispatcher skips them.
    assert jobs_dispatch(instance="second").claimed == 0
    worker.kill()  # SIGKILL to the worker and its pool child, mid-transaction

    # PostgreSQL rolls the dead connection's transaction back; a fresh dispatcher fires each once.
    fired = 0

    def fresh() -> bool:
        nonlocal fired
        fired += jobs_dispatch(instance="fresh").started
        return fired >= 5

    wait_for(fresh, timeout=30, interval=0.2, what="the rows to be released and fired")
    assert jobs_dispatch(instance="fresh").started == 0
    per_job = Counter(Run.objects.filter(job__in=jobs).values_list("job_id", flat=True))
    assert per_job == {job.id: 1 for job in jobs}
    assert TaskExecutionHistory.objects.filter(job__in=jobs, status="started", worker="fresh").count() == 5
    assert not ScheduledJob.objects.filter(job__in=jobs).exists()


@pytest.mark.both_brokers
def test_two_dispatchers__1000_jobs__every_occurrence_fires_exactly_once(
    beat_dispatcher_off, owner, broker_env
):
    # 600 every-minute jobs whose occurrence is spread over 15 s by their jitter, and 400
    # one-off jobs due every few seconds meanwhile; two dispatcher processes tick against them.
    # (Rows written in bulk, as `job_create` writes them one by one.) The occurrence is the
    # coming minute when it is near; otherwise the minute just begun, due from now on (as if
    # the dispatchers were a little late), so the test never waits long for a minute to come.
    now = job_transitions.db_now()
    upcoming = cron_next("* * * * *", "UTC", now)
    assert upcoming is not None
    if upcoming - now >= timedelta(seconds=25):
        minute, due_from = upcoming - timedelta(minutes=1), now + timedelta(seconds=2)
    else:
        minute, due_from = upcoming, upcoming
    rng = random.Random(8)
    common = {"owner": owner, "workflow": ENGINE_WORKFLOW, "input": ENGINE_INPUT}
    recurring = {"is_recurring": True, "cron": "* * * * *", "jitter": 15, "overlap_policy": "allow_all"}
    spread = (due_from - now).total_seconds() + 15
    jobs = Job.objects.bulk_create(
        [Job(name=f"minute-{i}", **recurring, **common) for i in range(600)]
        + [
            Job(name=f"once-{i}", run_at=now + timedelta(seconds=rng.uniform(1, spread)), **common)
            for i in range(400)
        ]
    )
    rows = []
    for job in jobs:
        if job.is_recurring:
            t, due = minute, due_from + jitter_offset(job.id, minute, job.jitter)
        else:
            assert job.run_at is not None
            t = due = job.run_at
        rows.append(ScheduledJob(job=job, scheduled_for=t, next_execution_at=due))
    ScheduledJob.objects.bulk_create(rows)
    expected = {(row.job_id, row.scheduled_for) for row in rows}
    last_due = max(row.next_execution_at for row in rows if row.next_execution_at)
    # Every occurrence is due by then; the next ones (a minute later) are not.
    until = time.time() + (last_due - job_transitions.db_now()).total_seconds() + 4

    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.scheduler.jobs_dispatcher_loop",
                "--name",
                name,
                "--until",
                str(until),
            ],
            cwd=REPO,
            # 1,000 runs of one owner: the per-user runs-in-flight quota (issue 18) is not what
            # this measures (the dispatcher would skip past it, as tests/jobs/test_limits.py shows).
            env={**broker_env, "SAS_QUOTA_RUNS_IN_FLIGHT": "0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("dispatcher-A", "dispatcher-B")
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=until - time.time() + 60)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))

    assert all(not r["errors"] for r in reports), reports
    fired = Counter(Run.objects.filter(job__owner=owner).values_list("job_id", "scheduled_for"))
    assert set(fired) == expected  # none missing, none extra
    assert set(fired.values()) == {1}  # none twice
    assert sum(r["started"] for r in reports) == 1000
    assert all(r["started"] > 0 for r in reports), reports  # both really dispatched
    assert not TaskExecutionHistory.objects.filter(job__owner=owner, status="skipped").exists()
    # The recurring jobs' next rows moved on by one minute, their jitter recomputed.
    for row in ScheduledJob.objects.filter(job__owner=owner, kind="next")[:50]:
        assert row.next_execution_at == row.scheduled_for + jitter_offset(row.job_id, row.scheduled_for, 15)


def test_run_now_hammered__non_idempotent_job_never_has_two_runs_at_once(beat_dispatcher_off, owner):
    job = new_job(owner, "exclusive", cron="@daily", idempotent=False)
    stop = threading.Event()
    outcomes: Counter[str] = Counter()
    errors: list[str] = []

    def hammer() -> None:
        try:
            for _ in range(15):
                outcomes[job_run_now(by_staff=False, job_id=job.id, actor="hammer").outcome] += 1
        except Exception as exc:
            errors.append(repr(exc))
        finally:
            connection.close()

    def finisher() -> None:
        # Ends whatever run is going, so that new ones can start.
        try:
            while not stop.is_set():
                for run_id in Run.objects.filter(job=job, state__in=Run.UNFINISHED_STATES).values_list(
                    "id", flat=True
                ):
                    with contextlib.suppress(RunNotCancellable):  # it ended meanwhile
                        run_cancel(run_id=run_id, actor="finisher")
                time.sleep(0.01)
        finally:
            connection.close()

    ender = threading.Thread(target=finisher)
    threads = [threading.Thread(target=hammer) for _ in range(6)]
    ender.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    ender.join(timeout=30)

    assert not errors, errors
    assert outcomes["started"] >= 2 and outcomes["skipped"] >= 1 and sum(outcomes.values()) == 90
    spans = sorted(
        (h.started_at, h.run.finished_at)
        for h in TaskExecutionHistory.objects.filter(
            job=job, status__in=["started", "cancelled"]
        ).select_related("run")
    )
    assert len(spans) == outcomes["started"]
    for (_, previous_end), (start, _) in itertools.pairwise(spans):
        assert previous_end is not None and start >= previous_end, "two runs of the job were going at once"
    assert Run.objects.filter(job=job, state__in=Run.UNFINISHED_STATES).count() <= 1


def test_beat__fires_a_job_and_settles_its_run_end(engine, owner):
    # A job whose run the session's agents can finish: a @schedulable task (queue agent.tasks).
    # (It once used the engine's test workflow, whose operations no worker consumes: a cancel
    # that came after the scheduler's claim left the run compensating for good - a race that
    # the full xdist suite lost and a lone run won.)
    row = PeriodicTask.objects.get(name=DISPATCHER_ROW)
    assert row.enabled and row.task == "scheduler.jobs_dispatch" and row.interval.every == 1
    assert row.queue == "jobs"  # the dispatcher's own worker (Procfile `dispatcher`)
    # The purge is staff-only work: an owner in the Operators role, scheduling it as such.
    join_role(owner, OPERATOR_GROUP)
    job = job_create(
        by_staff=True,
        owner_id=owner.id,
        name="beat-once",
        workflow="task:webhooks.purge_deliveries",
        input={"kwargs": {"older_than_days": 30}},
        cron="",
    )

    run = wait_for(
        lambda: Run.objects.filter(job=job).first(), timeout=60, what="beat's dispatcher to fire the job"
    )
    attempt = wait_for(
        lambda: TaskExecutionHistory.objects.filter(
            job=job, run=run, kind="job", ended_at__isnull=False
        ).first(),
        timeout=60,
        what="the run to complete and the dispatcher to settle its end",
    )
    assert Run.objects.get(pk=run.pk).state == Run.State.COMPLETED
    assert attempt.status == "succeeded" and attempt.worker not in ("", "test")
    assert Job.objects.get(pk=job.pk).finished_at is not None

"""What a live job page costs the server (issue 28): the job page and the run page refresh
themselves by asking for their own URL (jobs/static/jobs/live.js: every 2 s while a run goes,
every 10 s while the job is active), so one open page costs one render per poll.

    SAS_BENCH_DB=sasproject_bench_jobpages python bench/job_pages.py [--runs 10000] [--samples 50]

Builds its own database (SAS_BENCH_DB, migrated) with one user and one job with --runs runs,
each a one-step run whose step failed three times with a long raw error (an HTTP call answered
500) and which ended Compensated with nothing undone, plus its job history row (ORM bulk
inserts). Then times, warm,
GET of the job page (first page of runs and history, the Failed rule, the sentences, the grouped
rows) and of one run's page (steps, grouped attempts, timeline in the job's zone), through
Django's test client (no network), and prints p50 / p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, fmt_ms, percentile, print_table

ERROR = (
    "GET https://api.example.com/v2/warehouses/eu-central-1/stock-levels answered 500: "
    '{"error": "internal", "detail": "upstream database connection pool exhausted"}'
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()
    bench_environment()

    from datetime import datetime, timedelta

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from scheduler.dispatcher.transitions import db_now
    from scheduler.models import Job, Run, Step, TaskExecutionHistory

    H = TaskExecutionHistory
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE scheduler_runevent, scheduler_taskexecutionhistory, scheduler_step, scheduler_run,"
            " scheduler_scheduledjob, scheduler_job CASCADE"
        )
    user, _ = get_user_model().objects.get_or_create(username="jpbench")
    job = Job.objects.create(
        owner=user,
        name="bench job",
        workflow="http.call",
        input={"method": "GET", "url": "https://api.example.com/x"},
        is_recurring=True,
        cron="*/5 * * * *",
        timezone="Asia/Kolkata",
    )
    now = db_now()
    error = "step call failed: failed_transient 3 times (limit 3): " + ERROR
    ats: list[datetime] = [now - timedelta(minutes=5 * n) for n in range(1, args.runs + 1)]
    runs = [
        Run(
            workflow="http.call",
            owner=user,
            state=Run.State.COMPENSATED,
            job=job,
            scheduled_for=at,
            job_settled=True,
            error=error,
        )
        for at in ats
    ]
    Run.objects.bulk_create(runs, batch_size=2000)
    steps = [
        Step(
            run=r,
            name="call",
            kind=Step.Kind.FORWARD,
            seq=0,
            operation="agents.http.call",
            process_state=Step.State.ERROR,
            idempotency_key=f"{r.pk}:call",
            attempts=3,
            failure_count=3,
            last_error=ERROR,
        )
        for r in runs
    ]
    Step.objects.bulk_create(steps, batch_size=2000)
    history = [
        H(
            kind=H.Kind.ATTEMPT,
            status=H.Status.FAILED_TRANSIENT,
            worker="bench",
            error=ERROR,
            detail={"attempt": a},
            started_at=at + timedelta(seconds=2 * a),
            ended_at=at + timedelta(seconds=2 * a + 1),
            run=r,
            step=s,
        )
        for r, s, at in zip(runs, steps, ats, strict=True)
        for a in (1, 2, 3)
    ] + [
        H(
            kind=H.Kind.JOB,
            status=H.Status.COMPENSATED,
            worker="bench",
            error=error,
            detail={"reason": "schedule"},
            started_at=at,
            ended_at=at + timedelta(seconds=9),
            run=r,
            job=job,
            scheduled_for=at,
        )
        for r, at in zip(runs, ats, strict=True)
    ]
    H.objects.bulk_create(history, batch_size=5000)
    Run.objects.filter(job=job).update(finished_at=now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    run = Run.objects.filter(job=job).order_by("-created_at").first()
    assert run is not None
    # The pages' cost, not the static files': no collected manifest needed (as with DEBUG on).
    from django.conf import settings
    from django.test.utils import override_settings

    plain = "django.contrib.staticfiles.storage.StaticFilesStorage"
    override_settings(STORAGES={**settings.STORAGES, "staticfiles": {"BACKEND": plain}}).enable()
    client = Client()
    client.force_login(user)
    rows: list[tuple[str, object]] = [("runs of the job", args.runs)]
    for name, url in (("job page", f"/jobs/{job.pk}/"), ("run page", f"/jobs/{job.pk}/runs/{run.pk}/")):
        for _ in range(3):  # warm
            assert client.get(url, secure=True).status_code == 200
        times = []
        for _ in range(args.samples):
            start = time.perf_counter()
            response = client.get(url, secure=True)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200
        rows.append((f"{name} p50", fmt_ms(percentile(times, 0.5))))
        rows.append((f"{name} p99", fmt_ms(percentile(times, 0.99))))
    print_table(rows)


if __name__ == "__main__":
    main()

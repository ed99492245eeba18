"""Jobs (issue 8): the dispatcher at 100,000 recurring jobs, against django-celery-beat.

    SAS_BENCH_DB=benchjobs python bench/jobs.py [--jobs 100000] [--minutes 3] [--burst 100000]
        [--idle-sizes 10000 1000000] [--beat-sizes 1000 10000] [--only idle side lag burst] [--quick]

Real processes throughout, as `make run` lays them out (Procfile): celery beat with the project's
scheduler (django-celery-beat's DatabaseScheduler; it runs the `scheduler.jobs_dispatch` task
every SAS["JOBS_DISPATCH_INTERVAL"] s), the dispatcher's worker (-Q jobs -c 1), one control worker
(-Q scheduler,supervisor,default -c 1: the scheduler's kicks and ticks, the supervisor's sweep) and
one agent worker for
the bench's one-step no-op workflow (bench/jobs_tasks.py; threads, -c 8, as the Procfile's agent
workers). Every process loads the bench's workflow and tasks by SAS_WORKFLOW_MODULES=bench.jobs_tasks.

Jobs are written in bulk (a few INSERT ... SELECT statements) as copies of a template job made by
`job_create`, each with its own name, owner, cron and zone, and a next row whose time comes from
the project's cron code (`scheduler.dispatcher.cron.cron_next`) - the rows `job_create` writes; the script
checks that against `job_create` itself for a sample of schedules. The mix (per 100 jobs): 2
every minute, 8 every 5 minutes (5 offsets), 40 hourly (at every minute of the hour), 50 daily
(every quarter hour of the day), each spread over six time zones (UTC, Berlin, New York, Tokyo,
Kolkata, Sydney): ~4,300 occurrences a minute at 100,000 jobs, ~4,800 at a quarter hour.

Phases (--only picks some):
  idle   the dispatcher's cost per tick with nothing due, at each --idle-sizes (jobs_dispatch()
         called in this process, many times), and EXPLAIN (ANALYZE, BUFFERS) of each statement
         of an idle tick (the due claim: an index range scan of scheduledjob_due_idx);
  side   at each --beat-sizes: ours (as above) and the user's alternative - the same schedules
         as django-celery-beat PeriodicTasks (CrontabSchedule with its time zone) fired by
         `celery beat -S django_celery_beat.schedulers:DatabaseScheduler` to a worker running a
         probe task that records when it started - dispatch lag over --minutes, and the time an
         edit takes to take effect; printed as ratios;
  lag    ours at --jobs, dispatch lag over --minutes (and the edit);
  burst  --burst jobs all due in the same second: until every run is written (first step
         Pending), and until every run has completed (steps/s).

Dispatch lag, defined: for an occurrence at cron time T, ours is measured on the database clock
from T to (a) "written": the run row's created_at (the dispatcher's batch wrote it with its first
step Pending), and (b) "started": the run's `started` event, written when the scheduler claims
its first step and sends it to an agent - the run has started. The beat baseline's is T to the
time its probe task started in the worker (time.time() in the task): for an occurrence T, the
first probe of that PeriodicTask that started at or after T (a late beat serves several
occurrences with one send; each counts from its own T). Edits: --edit-lead seconds before the
end of the lag window, one daily job (ours: `job_update(cron="* * * * *")`; beat: the
PeriodicTask's crontab replaced and saved, as the admin does) gets a new schedule whose first
occurrence is the window's end; reported is how late that first new occurrence started.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, bench_environment, fmt_ms, log_dir, print_table, summary, truncate_engine

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney"]
# Per 100 jobs.
MIX = {"every minute": 2, "every 5 minutes": 8, "hourly": 40, "daily": 50}
OWNERS = 100
TARGET_LAG_P99 = 1.0
TARGET_BURST_WRITTEN = 10.0
# A probe that starts this long before its cron time still counts as that occurrence's.
EARLY_TOLERANCE = 0.5
CONTROL_QUEUES = "scheduler,supervisor,default"
DISPATCHER_QUEUES = "jobs"


@dataclass(frozen=True)
class Sched:
    kind: str
    cron: str
    tz: str
    count: int


def schedule_mix(n: int) -> list[Sched]:
    """n jobs over the mix's distinct (cron, zone) schedules, as evenly as the numbers allow."""
    crons: dict[str, list[str]] = {
        "every minute": ["* * * * *"],
        "every 5 minutes": [f"{o}-59/5 * * * *" for o in range(5)],
        "hourly": [f"{m} * * * *" for m in range(60)],
        "daily": [f"{m} {h} * * *" for h in range(24) for m in (0, 15, 30, 45)],
    }
    total_weight = sum(MIX.values())
    out: list[Sched] = []
    assigned = 0
    kinds = list(MIX)
    for i, kind in enumerate(kinds):
        share = n - assigned if i == len(kinds) - 1 else round(n * MIX[kind] / total_weight)
        assigned += share
        pairs = [(c, z) for c in crons[kind] for z in ZONES]
        # Interleave zones so that a small share still covers several zones.
        pairs.sort(key=lambda p: (ZONES.index(p[1]) + crons[kind].index(p[0])) % len(ZONES))
        base, extra = divmod(share, len(pairs))
        for j, (cron, tz) in enumerate(pairs):
            count = base + (1 if j < extra else 0)
            if count:
                out.append(Sched(kind, cron, tz, count))
    return out


# -- database helpers -------------------------------------------------------------------------


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def db_now() -> datetime:
    value: datetime = sql("SELECT statement_timestamp()")[0][0]
    return value


def bench_owners(k: int) -> list[int]:
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    names = [f"jobsbench-{i}" for i in range(k)]
    have = set(user_model.objects.filter(username__in=names).values_list("username", flat=True))
    user_model.objects.bulk_create([user_model(username=n) for n in names if n not in have])
    return list(user_model.objects.filter(username__in=names).order_by("id").values_list("id", flat=True))


def purge_redis(prefix: str) -> None:
    """Drop this bench's broker queues and flags between phases (stale messages of truncated runs)."""
    from sasproject.redis_client import get_redis

    redis = get_redis()
    keys = list(redis.scan_iter(match=f"{prefix}*", count=1000))
    for i in range(0, len(keys), 500):
        redis.delete(*keys[i : i + 500])


def reset(prefix: str) -> None:
    """No jobs, runs or history; no bench PeriodicTasks; the engine's own periodic tasks enabled."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    truncate_engine()
    sql("TRUNCATE scheduler_job, scheduler_scheduledjob CASCADE")
    PeriodicTask.objects.filter(name__startswith="jobsbench ").delete()
    CrontabSchedule.objects.filter(periodictask__isnull=True).delete()
    PeriodicTask.objects.exclude(name__startswith="jobsbench ").update(enabled=True)
    PeriodicTasks.update_changed()
    purge_redis(prefix)


# -- writing jobs in bulk, as job_create would ------------------------------------------------


def _copy_of(model: Any, alias: str, overrides: dict[str, str]) -> tuple[list[str], str]:
    """The columns of `model` but its id, and a SELECT list copying them from the row `alias`
    except where `overrides` (column -> SQL) says otherwise."""
    cols = [f.column for f in model._meta.concrete_fields if f.column != "id"]
    return cols, ", ".join(overrides.get(c, f"{alias}.{c}") for c in cols)


def fill_jobs(
    scheds: list[Sched],
    owner_ids: list[int],
    *,
    after: datetime,
    workflow: str | None = None,
    input: dict[str, Any] | None = None,
) -> float:
    """Write sum(count) recurring jobs (of the no-op workflow unless told) and their next rows.
    Returns seconds.

    A template job made by `job_create` gives every column's value; each copy gets its own
    name, owner, cron and zone, and its next occurrence after `after` from `scheduler.dispatcher.cron`
    (computed once per distinct schedule)."""
    from scheduler.dispatcher.cron import cron_next
    from scheduler.models import Job, ScheduledJob
    from scheduler.services.jobs import job_create

    if workflow is None:
        from bench.jobs_tasks import NOOP_WORKFLOW

        workflow = NOOP_WORKFLOW
    started = time.perf_counter()
    template = job_create(
        owner_id=owner_ids[0],
        by_staff=False,
        name="jobsbench template",
        workflow=workflow,
        input=input or {},
        cron="0 0 * * *",
    )
    nexts = [cron_next(s.cron, s.tz, after) for s in scheds]
    job_cols, select_job = _copy_of(
        Job,
        "t",
        {
            "owner_id": "(%(owners)s::bigint[])[1 + (g + s.idx) %% cardinality(%(owners)s::bigint[])]",
            "name": "'jobsbench ' || s.idx || '-' || g",
            "cron": "s.cron",
            "timezone": "s.tz",
            "created_at": "statement_timestamp()",
            "updated_at": "statement_timestamp()",
        },
    )
    sj_cols, select_sj = _copy_of(
        ScheduledJob,
        "ts",
        {
            "job_id": "ins.id",
            # The job's (the tenant keys' composite foreign key, decision record 55).
            "owner_id": "ins.owner_id",
            "scheduled_for": "s.nxt",
            "next_execution_at": "s.nxt",
            "created_at": "statement_timestamp()",
        },
    )
    statement = f"""
        WITH s AS (
            SELECT * FROM unnest(%(idx)s::int[], %(crons)s::text[], %(tzs)s::text[], %(counts)s::int[],
                                 %(nexts)s::timestamptz[]) AS s(idx, cron, tz, n, nxt)
        ), ins AS (
            INSERT INTO scheduler_job ({", ".join(job_cols)})
            SELECT {select_job}
            FROM s CROSS JOIN LATERAL generate_series(1, s.n) AS g, scheduler_job AS t
            WHERE t.id = %(template)s
            RETURNING id, cron, timezone, owner_id
        )
        INSERT INTO scheduler_scheduledjob ({", ".join(sj_cols)})
        SELECT {select_sj}
        FROM ins JOIN s ON s.cron = ins.cron AND s.tz = ins.timezone, scheduler_scheduledjob AS ts
        WHERE ts.job_id = %(template)s
    """
    chunk = 50  # distinct schedules per statement: progress, and bounded statement memory
    for i in range(0, len(scheds), chunk):
        part = scheds[i : i + chunk]
        sql(
            statement,
            {
                "idx": list(range(i, i + len(part))),
                "crons": [s.cron for s in part],
                "tzs": [s.tz for s in part],
                "counts": [s.count for s in part],
                "nexts": nexts[i : i + len(part)],
                "owners": owner_ids,
                "template": template.pk,
            },
        )
    sql("DELETE FROM scheduler_scheduledjob WHERE job_id = %s", [template.pk])
    sql("DELETE FROM scheduler_job WHERE id = %s", [template.pk])
    sql("ANALYZE scheduler_job")
    sql("ANALYZE scheduler_scheduledjob")
    return time.perf_counter() - started


def check_fill(scheds: list[Sched], owner_id: int) -> str:
    """Compare bulk-written rows with what `job_create` writes now for the same schedules."""
    from scheduler.dispatcher.cron import cron_next
    from scheduler.models import Job, ScheduledJob
    from scheduler.services.jobs import job_create

    skip_job = {"id", "owner", "name", "created_at", "updated_at"}
    skip_sj = {"id", "job", "created_at"}
    sample = scheds[:: max(1, len(scheds) // 7)][:8]
    differences: list[str] = []
    boundary = 0
    for s in sample:
        bulk = Job.objects.filter(cron=s.cron, timezone=s.tz, name__startswith="jobsbench ").first()
        if bulk is None:
            continue
        made = job_create(
            owner_id=owner_id,
            by_staff=False,
            name=f"jobsbench check {s.cron} {s.tz}",
            workflow=bulk.workflow,
            input=bulk.input,
            cron=s.cron,
            timezone_name=s.tz,
        )
        for field in Job._meta.concrete_fields:
            if field.name not in skip_job and getattr(bulk, field.attname) != getattr(made, field.attname):
                differences.append(
                    f"job.{field.name}: {getattr(bulk, field.attname)!r} != {getattr(made, field.attname)!r}"
                )
        a = ScheduledJob.objects.get(job=bulk)
        b = ScheduledJob.objects.get(job=made)
        if a.scheduled_for != b.scheduled_for and b.scheduled_for == cron_next(s.cron, s.tz, a.scheduled_for):
            # The bulk row's occurrence passed between the two writes: job_create, a moment
            # later, armed the following one - as it should. Compare the rest.
            boundary += 1
            a.scheduled_for, a.next_execution_at = b.scheduled_for, b.next_execution_at
        for field in ScheduledJob._meta.concrete_fields:
            if field.name not in skip_sj and getattr(a, field.attname) != getattr(b, field.attname):
                differences.append(
                    f"scheduledjob.{field.name} ({s.cron} {s.tz}): {getattr(a, field.attname)!r} != "
                    f"{getattr(b, field.attname)!r}"
                )
        ScheduledJob.objects.filter(job=made).delete()
        made.delete()
    if differences:
        return "DIFFERENT: " + "; ".join(differences[:5])
    passed = f"; {boundary} occurrence(s) passed in between" if boundary else ""
    compared = f"{len(sample)} schedules compared, all columns but id/name/owner/times"
    return f"same as job_create's ({compared}{passed})"


# -- processes ---------------------------------------------------------------------------------


class AutoAnalyze:
    """autovacuum's ANALYZE, done by the bench: the machine's PostgreSQL runs with autovacuum
    off (its conf.d/90-ci.conf), production's default is on, and the engine's statements are
    planned from statistics - without them a burst's tables keep the plans of empty tables
    (a reply then took 20-140 ms instead of ~1 ms, bench/README.md). Every `every` seconds,
    each table whose changes since its last analyze pass autovacuum's default threshold
    (50 rows + 10% of the table) is analyzed - what autovacuum (naptime 1 min) would do."""

    def __init__(self, dsn: str, every: float = 30.0) -> None:
        import threading

        self.dsn, self.every = dsn, every
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="autoanalyze", daemon=True)
        self.analyzed: list[tuple[float, str]] = []

    def __enter__(self) -> AutoAnalyze:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stop_event.wait(self.every):
                due = conn.execute(
                    "SELECT relname FROM pg_stat_user_tables "
                    "WHERE n_mod_since_analyze > 50 + 0.1 * greatest(n_live_tup, 0)"
                ).fetchall()
                for (name,) in due:
                    conn.execute(f'ANALYZE "{name}"')
                    self.analyzed.append((time.time(), name))


def autoanalyze() -> AutoAnalyze:
    from django.db import connection

    params = connection.get_connection_params()
    return AutoAnalyze(psycopg_conninfo(params))


def psycopg_conninfo(params: dict[str, Any]) -> str:
    from psycopg.conninfo import make_conninfo

    keep = {k: v for k, v in params.items() if k in {"dbname", "user", "password", "host", "port"} and v}
    return make_conninfo(**keep)


class Stack:
    """Started processes, stopped in reverse order."""

    def __init__(self) -> None:
        self.procs: list[Any] = []

    def add(self, proc: Any, marker: str) -> Any:
        self.procs.append(proc.start(ready_marker=marker, timeout=90))
        return proc

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()


def bench_worker(
    name: str, queues: str, logs: Path, env: dict[str, str], *, concurrency: int, pool: str
) -> Any:
    from sastools.harness import celery_worker

    return celery_worker(name=name, queues=queues, log_dir=logs, env=env, concurrency=concurrency, pool=pool)


def start_ours(
    env: dict[str, str],
    logs: Path,
    tag: str,
    *,
    dispatchers: int = 1,
    profile_dir: Path | None = None,
    agents: int = 1,
) -> Stack:
    """Beat (project scheduler: dispatcher, sweep, tick), `dispatchers` dispatcher workers (queue
    jobs, 1 process each: the Procfile's `dispatcher`, scaled out) and the control worker as the
    Procfile lays them out, the no-op agents. The dispatchers' workers come first (the one
    `--profile` samples with py-spy in the burst). `profile_dir`: the dispatchers cProfile their
    ticks into it (bench/jobs_tasks.py). `agents`: no-op agent worker processes (8 threads each)."""
    from bench.jobs_tasks import NOOP_QUEUE, PROFILE_ENV
    from sastools.harness import celery_beat

    stack = Stack()
    control_env = {**env, "DATABASE_APPLICATION_NAME": "jobsbench-control"}
    dispatcher_env = {**env, "DATABASE_APPLICATION_NAME": "jobsbench-dispatcher"}
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        dispatcher_env[PROFILE_ENV] = str(profile_dir)
    for i in range(dispatchers):
        stack.add(
            bench_worker(
                f"dispatcher{i or ''}-{tag}",
                DISPATCHER_QUEUES,
                logs,
                dispatcher_env,
                concurrency=1,
                pool="prefork",
            ),
            " ready.",
        )
    agent_env = {**env, "DATABASE_APPLICATION_NAME": "jobsbench-agent", "DATABASE_POOL_MAX_SIZE": "2"}
    stack.add(
        bench_worker(f"control-{tag}", CONTROL_QUEUES, logs, control_env, concurrency=1, pool="prefork"),
        " ready.",
    )
    for i in range(agents):
        stack.add(
            bench_worker(f"agent{i or ''}-{tag}", NOOP_QUEUE, logs, agent_env, concurrency=8, pool="threads"),
            " ready.",
        )
    beat = celery_beat(log_dir=logs, env=env)
    beat.name, beat.log_path = f"beat-{tag}", logs / f"beat-{tag}.log"
    stack.add(beat, "beat: Starting")
    return stack


def start_beat_baseline(env: dict[str, str], logs: Path, tag: str) -> Stack:
    from bench.jobs_tasks import PROBE_QUEUE
    from sastools.harness import celery_beat

    stack = Stack()
    stack.add(bench_worker(f"probe-{tag}", PROBE_QUEUE, logs, env, concurrency=2, pool="prefork"), " ready.")
    beat = celery_beat(log_dir=logs, env=env)
    beat.name, beat.log_path = f"dcb-beat-{tag}", logs / f"dcb-beat-{tag}.log"
    beat.args.insert(beat.args.index("beat") + 1, "-S")
    beat.args.insert(beat.args.index("-S") + 1, "django_celery_beat.schedulers:DatabaseScheduler")
    stack.add(beat, "beat: Starting")
    return stack


# -- windows and occurrences -------------------------------------------------------------------


def next_boundary(lead: float) -> float:
    """The first whole minute at least `lead` seconds from now (epoch seconds)."""
    return math.ceil((time.time() + lead) / 60.0) * 60.0


def sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 1.0))


def occurrences(s: Sched, start: float, end: float) -> list[float]:
    """Cron times of `s` in [start, end) (epoch seconds), by the project's cron code."""
    from scheduler.dispatcher.cron import cron_between

    after = datetime.fromtimestamp(start, UTC) - timedelta(microseconds=1)
    until = datetime.fromtimestamp(end, UTC) - timedelta(microseconds=1)
    times, _ = cron_between(s.cron, s.tz, after=after, until=until, limit=100_000)
    return [t.timestamp() for t in times]


def expected_firings(scheds: list[Sched], start: float, end: float) -> int:
    return sum(s.count * len(occurrences(s, start, end)) for s in scheds)


def _hms(t: float) -> str:
    return f"{datetime.fromtimestamp(t, UTC):%H:%M:%S}"


def edit_target_daily(scheds: list[Sched], boundary: float) -> Sched:
    """A UTC daily schedule that does not fire within two minutes of `boundary`."""
    for s in scheds:
        if s.kind == "daily" and s.tz == "UTC" and not occurrences(s, boundary - 120, boundary + 180):
            return s
    raise RuntimeError("no daily UTC schedule to edit in the mix")


# -- ours ---------------------------------------------------------------------------------------


def ours_window(start: float, end: float) -> dict[str, Any]:
    rows = sql(
        """
        SELECT extract(epoch FROM r.scheduled_for)::float8, extract(epoch FROM r.created_at)::float8,
               extract(epoch FROM e.created_at)::float8
        FROM scheduler_run AS r
        LEFT JOIN scheduler_runevent AS e ON e.run_id = r.id AND e.type = 'started'
        WHERE r.job_id IS NOT NULL AND r.job_attempt = 0
          AND r.scheduled_for >= to_timestamp(%s) AND r.scheduled_for < to_timestamp(%s)
        """,
        [start, end],
    )
    history = dict(
        sql(
            """
            SELECT status || ':'
                   || regexp_replace(coalesce(detail->>'reason', ''), 'run [0-9a-f-]{36}', 'run X', 'g'),
                   count(*)
            FROM scheduler_taskexecutionhistory
            WHERE kind = 'job' AND status NOT IN ('started', 'succeeded', 'failed')
              AND scheduled_for >= to_timestamp(%s) AND scheduled_for < to_timestamp(%s)
            GROUP BY 1
            """,
            [start, end],
        )
    )
    written = [max(c - t, 0.0) for t, c, _ in rows]
    started = [max(s - t, 0.0) for t, _, s in rows if s is not None]
    return {
        "runs": len(rows),
        "written": summary(written),
        "started": summary(started),
        "not_started": sum(1 for *_, s in rows if s is None),
        "other_history": history,
    }


def wait_settled(count: Any, *, quiet: float, cap: float) -> None:
    """Until count() has not changed for `quiet` seconds (at most `cap`)."""
    deadline = time.monotonic() + cap
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return
        time.sleep(0.5)


def lag_ours(
    env: dict[str, str],
    n: int,
    minutes: int,
    lead: float,
    owner_ids: list[int],
    logs: Path,
    *,
    dispatchers: int = 1,
    profile: bool = False,
) -> dict[str, Any]:
    from scheduler.models import Job, Run
    from scheduler.services.jobs import job_update

    reset(env["SAS_REDIS_PREFIX"])
    scheds = schedule_mix(n)
    # Rows armed from a time just before the window, as job_create would have armed them then.
    fill_s = fill_jobs(scheds, owner_ids, after=db_now())
    check = check_fill(scheds, owner_ids[0])
    print(f"  ours: {n:,} jobs written in {fill_s:.1f} s; bulk rows {check}", flush=True)
    profile_dir = logs / f"profile-ours-{n}" if profile else None
    stack = start_ours(env, logs, f"ours-{n}", dispatchers=dispatchers, profile_dir=profile_dir)
    try:
        start = next_boundary(10)
        end = start + 60 * minutes
        expected = expected_firings(scheds, start, end)
        print(
            f"  ours: window {_hms(start)} - {_hms(end)} UTC, {expected:,} occurrences due in it",
            flush=True,
        )
        target = edit_target_daily(scheds, end)
        edited = Job.objects.filter(cron=target.cron, timezone=target.tz).order_by("id").first()
        assert edited is not None
        sleep_until(end - lead)
        t_edit = time.time()
        job_update(job_id=edited.pk, by_staff=False, cron="* * * * *")
        t_committed = time.time()
        window_runs = Run.objects.filter(
            job__isnull=False,
            scheduled_for__gte=datetime.fromtimestamp(start, UTC),
            scheduled_for__lt=datetime.fromtimestamp(end, UTC),
        )
        sleep_until(end + 2)
        wait_settled(window_runs.count, quiet=3, cap=120)
        # The started lag needs the runs' first claims (the agents' pace under load).
        wait_settled(lambda: window_runs.filter(state__in=[Run.State.PENDING]).count(), quiet=5, cap=180)
        edit_run = _wait_run(edited.pk, end, cap=90)
    finally:
        stack.stop()
    result = ours_window(start, end)
    if profile_dir is not None:
        result["profile"] = dispatcher_profile(profile_dir)
    result.update(
        jobs=n,
        dispatchers=dispatchers,
        fill_s=fill_s,
        fill_check=check,
        expected=expected,
        edit={"lead": end - t_edit, "update_s": t_committed - t_edit, **edit_run},
    )
    return result


def dispatcher_profile(profile_dir: Path, top: int = 45) -> str:
    """The dispatchers' cProfile stats (all processes merged), by cumulative time, written to
    `profile_dir/summary.txt`; returns its path."""
    import io
    import pstats

    files = sorted(str(p) for p in profile_dir.glob("dispatcher-*.prof"))
    out = profile_dir / "summary.txt"
    if not files:
        out.write_text("no profile written\n")
        return str(out)
    buffer = io.StringIO()
    stats = pstats.Stats(files[0], stream=buffer)
    for f in files[1:]:
        stats.add(f)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(25)
    out.write_text(buffer.getvalue())
    return str(out)


def _wait_run(job_id: int, at: float, *, cap: float) -> dict[str, float | None]:
    """The run of job_id for the occurrence at `at`: how late it was written and started."""
    deadline = time.monotonic() + cap
    while time.monotonic() < deadline:
        rows = sql(
            """
            SELECT extract(epoch FROM r.created_at)::float8, extract(epoch FROM e.created_at)::float8
            FROM scheduler_run AS r
            LEFT JOIN scheduler_runevent AS e ON e.run_id = r.id AND e.type = 'started'
            WHERE r.job_id = %s AND r.scheduled_for = to_timestamp(%s)
            """,
            [job_id, at],
        )
        if rows and rows[0][1] is not None:
            return {"written": rows[0][0] - at, "started": rows[0][1] - at}
        time.sleep(0.2)
    return {"written": None, "started": None}


def on_time(
    env: dict[str, str], owner_ids: list[int], logs: Path, *, n: int, spacing: float, beat_every: float
) -> dict[str, Any]:
    """The tick at the due time (issue 20): `n` one-off jobs due `spacing` s apart (each at a
    random fraction of a second), between two beat sends `beat_every` s apart, fired by one
    dispatcher worker (queue jobs, 1 process; SAS_JOBS_DISPATCH_INTERVAL = `beat_every`, so it
    wakes itself for a row due before the next send). The bench plays beat: one send before the
    first occurrence, then every `beat_every` s - as the live test does, so no occurrence is
    fired by a beat send it happened to follow closely. Lag = the run's created_at (the batch's
    write; the history row's started_at is the same instant) - its due time, database clock."""
    import random

    from celery import current_app

    from bench.jobs_tasks import NOOP_WORKFLOW
    from scheduler.models import Run
    from scheduler.services.jobs import job_create

    reset(env["SAS_REDIS_PREFIX"])
    denv = {
        **env,
        "DATABASE_APPLICATION_NAME": "jobsbench-ontime",
        "SAS_JOBS_DISPATCH_INTERVAL": str(beat_every),
        "SAS_JOBS_DISPATCH_QUEUE": "jobs-ontime",
    }
    stack = Stack()
    stack.add(
        bench_worker("dispatcher-ontime", "jobs-ontime", logs, denv, concurrency=1, pool="prefork"), " ready."
    )
    rng = random.Random(20)
    try:
        first = db_now() + timedelta(seconds=4)
        dues = [first + timedelta(seconds=i * spacing + rng.random()) for i in range(n)]
        jobs = [
            job_create(
                owner_id=owner_ids[i % len(owner_ids)],
                by_staff=False,
                name=f"jobsbench ontime {i}",
                workflow=NOOP_WORKFLOW,
                input={},
                run_at=due,
            ).pk
            for i, due in enumerate(dues)
        ]
        sends = 0
        deadline = time.monotonic() + n * spacing + 60
        next_send = 0.0
        runs = Run.objects.filter(job_id__in=jobs)
        while runs.count() < n and time.monotonic() < deadline:
            if time.monotonic() >= next_send:
                current_app.send_task(
                    "scheduler.jobs_dispatch", queue="jobs-ontime", expires=beat_every, ignore_result=True
                )
                sends += 1
                next_send = time.monotonic() + beat_every
            time.sleep(0.2)
    finally:
        stack.stop()
    rows = sql(
        """
        SELECT extract(epoch FROM r.created_at - r.scheduled_for)::float8
        FROM scheduler_run AS r WHERE r.job_id = ANY(%s)
        """,
        [jobs],
    )
    lags = [lag for (lag,) in rows]
    return {
        "occurrences": n,
        "written": len(lags),
        "early": sum(1 for lag in lags if lag < 0),
        "lag": summary([max(lag, 0.0) for lag in lags]),
        "max": max(lags) if lags else None,
        "beat_sends": sends,
        "beat_every": beat_every,
        "spacing": spacing,
    }


# -- django-celery-beat -------------------------------------------------------------------------


def beat_fill(scheds: list[Sched]) -> tuple[float, dict[str, Sched]]:
    """The same schedules as PeriodicTasks (one CrontabSchedule per distinct cron and zone)."""
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    from bench.jobs_tasks import PROBE_QUEUE, PROBE_TASK

    started = time.perf_counter()
    tasks: list[Any] = []
    by_name: dict[str, Sched] = {}
    crontabs = CrontabSchedule.objects.bulk_create(
        [
            CrontabSchedule(
                minute=minute,
                hour=hour,
                day_of_month=dom,
                month_of_year=month,
                day_of_week=dow,
                timezone=s.tz,
            )
            for s in scheds
            for minute, hour, dom, month, dow in [s.cron.split()]
        ]
    )
    for i, (s, crontab) in enumerate(zip(scheds, crontabs, strict=True)):
        for g in range(s.count):
            name = f"jobsbench {i}-{g}"
            by_name[name] = s
            tasks.append(
                PeriodicTask(
                    name=name,
                    task=PROBE_TASK,
                    crontab=crontab,
                    queue=PROBE_QUEUE,
                    kwargs=json.dumps({"name": name}),
                )
            )
    PeriodicTask.objects.bulk_create(tasks, batch_size=2000)
    PeriodicTasks.update_changed()
    return time.perf_counter() - started, by_name


def probes(prefix: str) -> dict[str, list[float]]:
    from bench.jobs_tasks import probe_key
    from sasproject.redis_client import get_redis

    del prefix
    out: dict[str, list[float]] = {}
    for raw in get_redis().lrange(probe_key(), 0, -1):
        name, _, at = raw.decode().rpartition(" ")
        out.setdefault(name, []).append(float(at))
    for times in out.values():
        times.sort()
    return out


def beat_lags(
    by_name: dict[str, Sched], fired: dict[str, list[float]], start: float, end: float
) -> dict[str, Any]:
    import bisect

    lags: list[float] = []
    unfired = 0
    occ_cache: dict[Sched, list[float]] = {}
    for name, s in by_name.items():
        if s not in occ_cache:
            occ_cache[s] = occurrences(s, start, end)
        times = fired.get(name, [])
        for t in occ_cache[s]:
            k = bisect.bisect_left(times, t - EARLY_TOLERANCE)
            if k < len(times):
                lags.append(max(times[k] - t, 0.0))
            else:
                unfired += 1
    fired_in_window = sum(1 for ts in fired.values() for t in ts if start - EARLY_TOLERANCE <= t)
    return {
        "lag": summary(lags),
        "occurrences": len(lags) + unfired,
        "unfired": unfired,
        "sends": fired_in_window,
    }


def beat_log_changes(path: Path) -> list[float]:
    """Epoch times of beat's 'Schedule changed.' lines (its log's clock is this machine's, UTC)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if "Schedule changed" in line:
            m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
            if m:
                out.append(
                    datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp()
                )
    return out


def lag_beat(env: dict[str, str], n: int, minutes: int, lead: float, logs: Path) -> dict[str, Any]:
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    from bench.jobs_tasks import probe_key
    from sasproject.redis_client import get_redis

    reset(env["SAS_REDIS_PREFIX"])
    # Only the bench's tasks: the engine's own periodic tasks are switched off in this phase.
    PeriodicTask.objects.exclude(name__startswith="jobsbench ").update(enabled=False)
    scheds = schedule_mix(n)
    fill_s, by_name = beat_fill(scheds)
    get_redis().delete(probe_key())
    print(f"  beat: {n:,} PeriodicTasks written in {fill_s:.1f} s", flush=True)
    tag = f"dcb-{n}"
    stack = start_beat_baseline(env, logs, tag)
    beat_log = logs / f"dcb-beat-{tag}.log"
    try:
        start = next_boundary(10)
        end = start + 60 * minutes
        target = edit_target_daily(scheds, end)
        edited = next(name for name, s in by_name.items() if s == target)
        sleep_until(end - lead)
        t_edit = time.time()
        task = PeriodicTask.objects.get(name=edited)
        task.crontab = CrontabSchedule.objects.create(
            minute="*", hour="*", day_of_month="*", month_of_year="*", day_of_week="*", timezone="UTC"
        )
        task.save()
        t_committed = time.time()
        sleep_until(end + 2)
        count = lambda: get_redis().llen(probe_key())  # noqa: E731
        wait_settled(count, quiet=5, cap=150)
        edit_fire: float | None = None
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            later = [t for t in probes(env["SAS_REDIS_PREFIX"]).get(edited, []) if t >= end - EARLY_TOLERANCE]
            if later:
                edit_fire = later[0] - end
                break
            time.sleep(0.5)
    finally:
        stack.stop()
    fired = probes(env["SAS_REDIS_PREFIX"])
    fired.pop(edited, None)
    window = {k: v for k, v in by_name.items() if k != edited}
    result = beat_lags(window, fired, start, end)
    changes = [t - t_edit for t in beat_log_changes(beat_log) if t >= t_edit - 1]
    result.update(
        tasks=n,
        fill_s=fill_s,
        edit={
            "lead": end - t_edit,
            "update_s": t_committed - t_edit,
            "started": edit_fire,
            "seen_by_beat_s": changes[0] if changes else None,
        },
    )
    reset(env["SAS_REDIS_PREFIX"])
    return result


# -- idle tick cost ----------------------------------------------------------------------------


class _Capture:
    """A connection.execute_wrapper that keeps every statement with its parameters."""

    def __init__(self, into: list[tuple[str, Any]]) -> None:
        self.into = into

    def __call__(self, execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        self.into.append((statement, params))
        return execute(statement, params, many, context)


def idle_cost(owner_ids: list[int], sizes: list[int], reps: int, prefix: str) -> dict[str, Any]:
    from django.db import connection

    from scheduler.dispatcher.tick import jobs_dispatch

    results: dict[str, Any] = {}
    for n in sizes:
        reset(prefix)
        scheds = schedule_mix(n)
        # Nothing due while we measure: next rows armed from half an hour ahead (the same
        # distribution, shifted; the dispatcher never reads rows that are not due).
        fill_s = fill_jobs(scheds, owner_ids, after=db_now() + timedelta(minutes=30))
        # Settle the writes of the fill before timing (autovacuum and the checkpointer would
        # otherwise compete with the first ticks after a million-row insert).
        sql("VACUUM ANALYZE scheduler_scheduledjob")
        sql("VACUUM ANALYZE scheduler_job")
        sql("CHECKPOINT")
        time.sleep(5)
        for _ in range(10):
            jobs_dispatch(instance="jobsbench-idle")
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            done = jobs_dispatch(instance="jobsbench-idle")
            times.append(time.perf_counter() - t0)
            assert done.claimed == 0 and done.settled == 0, done
        captured: list[tuple[str, Any]] = []
        with connection.execute_wrapper(_Capture(captured)):
            jobs_dispatch(instance="jobsbench-idle")
        plans: list[dict[str, Any]] = []
        for statement, params in captured:
            text = "\n".join(
                line for line in statement.strip().splitlines() if not line.lstrip().startswith("--")
            ).strip()
            if not text.upper().startswith(("SELECT", "WITH", "UPDATE", "DELETE")):
                continue
            from django.db import transaction

            with transaction.atomic():
                rows = sql("EXPLAIN (ANALYZE, BUFFERS) " + text, params)
                transaction.set_rollback(True)
            plans.append({"statement": " ".join(text.split())[:300], "plan": [r[0] for r in rows]})
            # The statement's own time in the server, many times (what would grow with the
            # table; the call's wall time above is mostly round trips and commits).
            executions: list[float] = []
            for _ in range(100):
                with transaction.atomic():
                    out = sql("EXPLAIN (ANALYZE, TIMING OFF) " + text, params)
                    transaction.set_rollback(True)
                executions.extend(
                    float(line.split(":")[1].split()[0]) / 1000 for (line,) in out if "Execution Time" in line
                )
            plans[-1]["execution"] = summary(executions)
        results[str(n)] = {
            "jobs": n,
            "fill_s": fill_s,
            "tick": summary(times),
            "statements": len(captured),
            "plans": plans,
        }
        for p in plans:
            ex = p["execution"]
            print(
                f"    server execution p50 / p99 {ex['p50'] * 1e6:.0f} / {ex['p99'] * 1e6:.0f} us: "
                f"{p['statement'][:70]}...",
                flush=True,
            )
        print(
            f"  idle tick at {n:,} jobs (filled in {fill_s:.1f} s): p50 {fmt_ms(summary(times)['p50'])}, "
            f"p99 {fmt_ms(summary(times)['p99'])}, {len(captured)} statements",
            flush=True,
        )
    reset(prefix)
    return results


# -- burst ---------------------------------------------------------------------------------------


def burst(
    env: dict[str, str], n: int, owner_ids: list[int], logs: Path, *, profile: bool, drain_cap: float
) -> dict[str, Any]:
    from scheduler.models import Run, Step

    reset(env["SAS_REDIS_PREFIX"])
    # All n jobs on one daily UTC schedule whose next occurrence is a whole minute far enough
    # ahead for the writing and the processes' start.
    lead = 30 + n / 5000
    at = next_boundary(lead)
    t_at = datetime.fromtimestamp(at, UTC)
    sched = Sched("daily", f"{t_at.minute} {t_at.hour} * * *", "UTC", n)
    fill_s = fill_jobs([sched], owner_ids, after=db_now())
    print(f"  burst: {n:,} jobs due at {t_at:%H:%M:%S} UTC, written in {fill_s:.1f} s", flush=True)
    stack = start_ours(env, logs, f"burst-{n}")
    profiler = None
    try:
        if at - time.time() < 3:
            raise RuntimeError("the processes started too late for the burst; raise its lead")
        runs = Run.objects.filter(job__isnull=False, scheduled_for=t_at)
        sleep_until(at - 0.5)
        if profile:
            # From the burst's second until every run is written (stopped below).
            profiler = _start_profiler(stack.procs[0], logs)
        sleep_until(at)
        written_at = _poll_until(
            lambda: runs.count() >= n, cap=3600, what="every run written", stall=120, progress=runs.count
        )
        all_written = written_at - at
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes what it has on SIGINT
            profiler.wait(timeout=120)
        last_written = sql(
            "SELECT extract(epoch FROM max(created_at))::float8, extract(epoch FROM min(created_at))::float8 "
            "FROM scheduler_run WHERE job_id IS NOT NULL AND scheduled_for = %s",
            [t_at],
        )[0]
        pending_or_later = Step.objects.filter(run__in=runs, seq=0).count()
        # Until every run has ended, or --drain-cap seconds: at the engine's no-op pace a full
        # drain of 100,000 runs takes far longer than a shared machine should be saturated.
        deadline = time.monotonic() + drain_cap
        while runs.filter(state__in=Run.TERMINAL_STATES).count() < n and time.monotonic() < deadline:
            time.sleep(0.5)
        completed = runs.filter(state=Run.State.COMPLETED).count()
        ended = runs.filter(state__in=Run.TERMINAL_STATES).count()
        first_claim, last_finished = sql(
            "SELECT extract(epoch FROM min(e.created_at))::float8, "
            "(SELECT extract(epoch FROM max(finished_at))::float8 FROM scheduler_run "
            " WHERE job_id IS NOT NULL AND scheduled_for = %s) "
            "FROM scheduler_runevent e JOIN scheduler_run r ON r.id = e.run_id "
            "WHERE r.job_id IS NOT NULL AND r.scheduled_for = %s AND e.type = 'started'",
            [t_at, t_at],
        )[0]
    finally:
        if profiler is not None and profiler.poll() is None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(timeout=120)
        stack.stop()
    return {
        "jobs": n,
        "fill_s": fill_s,
        "all_written_s": all_written,
        "db_first_written_s": last_written[1] - at,
        "db_last_written_s": last_written[0] - at,
        "first_steps": pending_or_later,
        "completed": completed,
        "not_completed": ended - completed,
        "all_completed_s": (last_finished - at) if ended >= n else None,
        "drain_steps_per_s": completed / max(last_finished - first_claim, 1e-9) if completed else 0.0,
        "profile": str(logs / "dispatcher.pyspy.txt") if profile else None,
    }


def _poll_until(
    done: Any, *, cap: float, what: str, stall: float | None = None, progress: Any = None
) -> float:
    deadline = time.monotonic() + cap
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if done():
            return time.time()
        if progress is not None and stall is not None:
            now = progress()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > stall:
                raise RuntimeError(f"stalled waiting for {what} at {now}")
        time.sleep(0.1)
    raise RuntimeError(f"timed out after {cap}s waiting for {what}")


def _start_profiler(control: Any, logs: Path) -> Any:
    """py-spy on the control worker's pool child (the dispatcher), raw folded stacks, waits on
    PostgreSQL included (--idle), without pausing the process (--nonblocking)."""
    import shutil
    import subprocess

    import psutil

    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    children = psutil.Process(control.pid).children(recursive=True)
    pid = children[0].pid if children else control.pid
    return subprocess.Popen(
        [
            spy,
            "record",
            "--format",
            "raw",
            "--rate",
            "100",
            "--idle",
            "--nonblocking",
            "--pid",
            str(pid),
            "--output",
            str(logs / "dispatcher.pyspy.txt"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


# -- the floor of a set-based dispatcher batch (not the engine's code) -----------------------------


def _template_select(
    instance: Any, overrides: dict[str, str], prefix: str
) -> tuple[list[str], list[str], dict[str, Any]]:
    """Columns, SELECT expressions and parameters that write rows like `instance` (a model
    instance as the engine would save it), with per-row `overrides` (column -> SQL)."""
    from django.db import connection
    from django.db.models.expressions import DatabaseDefault

    cols, exprs, params = [], [], {}
    for field in instance._meta.concrete_fields:
        if field.column in overrides:
            cols.append(field.column)
            exprs.append(overrides[field.column])
            continue
        if field.primary_key and getattr(instance, field.attname) is None:
            continue
        value = field.pre_save(instance, add=True)
        if isinstance(value, DatabaseDefault):
            continue
        key = f"{prefix}_{field.column}"
        cols.append(field.column)
        exprs.append(f"%({key})s")
        params[key] = field.get_db_prep_save(value, connection)
    return cols, exprs, params


def floor_statement() -> tuple[str, dict[str, Any]]:
    """One statement that writes what the dispatcher writes for a batch of fresh occurrences of
    the no-op workflow (runs, first steps Pending, received events, the job history rows), moves
    the next rows and counts the firings - from arrays of the claimed rows and their next times."""
    from bench.jobs_tasks import NOOP_WORKFLOW
    from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
    from scheduler.services.submit import step_new
    from scheduler.workflows import get_workflow

    definition = get_workflow(NOOP_WORKFLOW)
    stamp = "statement_timestamp()"
    run = Run(workflow=NOOP_WORKFLOW, input={}, job_attempt=0)
    run_cols, run_exprs, params = _template_select(
        run,
        {
            "id": "gen_random_uuid()",
            "workflow": "j.workflow",
            "input": "j.input",
            "owner_id": "j.owner_id",
            "priority": "j.priority",
            "job_id": "c.job_id",
            "scheduled_for": "c.sfor",
            "correlation_id": "'job:' || c.job_id",
            "created_at": stamp,
            "updated_at": stamp,
        },
        "run",
    )
    step = step_new(run, definition.steps[0], seq=0, kind=Step.Kind.FORWARD, state=Step.State.PENDING)
    step.payload = definition.steps[0].payload(None)  # type: ignore[arg-type]
    step_cols, step_exprs, p = _template_select(
        step,
        {
            "run_id": "r.id",
            "idempotency_key": f"r.id || ':{step.name}'",
            "priority": "r.priority",
            "created_at": stamp,
            "updated_at": stamp,
        },
        "step",
    )
    params.update(p)
    event = RunEvent(type=RunEvent.Type.RECEIVED, data={})
    ev_cols, ev_exprs, p = _template_select(
        event,
        {
            "event_id": "gen_random_uuid()",
            "run_id": "r.id",
            "created_at": stamp,
            "data": f"jsonb_build_object('workflow', '{NOOP_WORKFLOW}', "
            "'correlation_id', 'job:' || r.job_id)",
        },
        "ev",
    )
    params.update(p)
    history = TaskExecutionHistory(
        kind=TaskExecutionHistory.Kind.JOB,
        status=TaskExecutionHistory.Status.STARTED,
        retry_count=0,
        worker="jobsbench-floor",
        detail={"reason": "schedule"},
        started_at=datetime.now(UTC),
    )
    h_cols, h_exprs, p = _template_select(
        history,
        {"run_id": "r.id", "job_id": "r.job_id", "scheduled_for": "r.scheduled_for", "started_at": stamp},
        "h",
    )
    params.update(p)
    statement = f"""
        WITH c AS (
            SELECT c.* FROM unnest(%(sj)s::bigint[], %(job)s::bigint[], %(sfor)s::timestamptz[],
                                   %(nxt)s::timestamptz[]) AS c(sj_id, job_id, sfor, nxt)
            -- the overlap rule (skip): no run of the job still going (run_job_unfinished_idx)
            WHERE NOT EXISTS (
                SELECT 1 FROM scheduler_run AS u
                WHERE u.job_id = c.job_id AND u.state IN ('pending', 'running', 'compensating')
            )
        ), runs AS (
            INSERT INTO scheduler_run ({", ".join(run_cols)})
            SELECT {", ".join(run_exprs)} FROM c JOIN scheduler_job AS j ON j.id = c.job_id
            RETURNING id, job_id, scheduled_for, priority
        ), steps AS (
            INSERT INTO scheduler_step ({", ".join(step_cols)}) SELECT {", ".join(step_exprs)} FROM runs AS r
        ), events AS (
            INSERT INTO scheduler_runevent ({", ".join(ev_cols)}) SELECT {", ".join(ev_exprs)} FROM runs AS r
        ), history AS (
            INSERT INTO scheduler_taskexecutionhistory ({", ".join(h_cols)})
            SELECT {", ".join(h_exprs)} FROM runs AS r
        ), moved AS (
            UPDATE scheduler_scheduledjob AS sj SET scheduled_for = c.nxt, next_execution_at = c.nxt
            FROM c WHERE sj.id = c.sj_id AND sj.kind = 'next' AND sj.scheduled_for = c.sfor
        ), fired AS (
            UPDATE scheduler_job AS j SET firing_count = j.firing_count + 1 FROM c WHERE j.id = c.job_id
        )
        SELECT count(*) FROM runs
    """
    return statement, params


def due_now(owner_ids: list[int], n: int, prefix: str) -> datetime:
    """A clean store with n jobs on one daily UTC schedule whose occurrence at this minute's
    start is due now (their next rows in the past). Returns that occurrence's time."""
    reset(prefix)
    at = db_now().replace(second=0, microsecond=0)
    fill_jobs(
        [Sched("daily", f"{at.minute} {at.hour} * * *", "UTC", n)], owner_ids, after=at - timedelta(seconds=1)
    )
    return at


def pending_first_steps(at: datetime) -> int:
    """Runs of the occurrence at `at` whose first step is Pending."""
    return int(
        sql(
            "SELECT count(*) FROM scheduler_run r JOIN scheduler_step s ON s.run_id = r.id "
            "AND s.seq = 0 AND s.process_state = 'pending' WHERE r.scheduled_for = %s",
            [at],
        )[0][0]
    )


def floor(owner_ids: list[int], n: int, batch: int, prefix: str) -> dict[str, Any]:
    """n occurrences due, written set-based in batches: the claim (the dispatcher's own
    statement), the overlap check, the next times (the project's cron code, once per distinct
    schedule and time) and one statement for the rest. A measure of what a set-based batch
    would cost on this machine - the fix suggested for the burst - not the engine's code."""
    import psycopg
    from django.db import connection, transaction

    from scheduler.dispatcher import transitions as job_transitions
    from scheduler.dispatcher.cron import cron_next
    from scheduler.models import Job

    at = due_now(owner_ids, n, prefix)
    statement, base = floor_statement()
    schedules = dict(Job.objects.values_list("id", "cron"))
    zones = dict(Job.objects.values_list("id", "timezone"))
    claim_s = python_s = write_s = 0.0
    written = 0
    started = time.perf_counter()
    while True:
        with transaction.atomic():
            t0 = time.perf_counter()
            rows = job_transitions.scheduled_claim_due(limit=batch).rows
            t1 = time.perf_counter()
            claim_s += t1 - t0
            if not rows:
                break
            params = {
                **base,
                "sj": [r.id for r in rows],
                "job": [r.job_id for r in rows],
                "sfor": [r.scheduled_for for r in rows],
                "nxt": [cron_next(schedules[r.job_id], zones[r.job_id], r.scheduled_for) for r in rows],
            }
            t2 = time.perf_counter()
            python_s += t2 - t1
            # Server-side binding (psycopg's own Cursor, not Django's client-side one): the
            # arrays go as parameters instead of being quoted into the statement text in Python.
            with psycopg.Cursor(connection.connection) as cursor:
                cursor.execute(statement, params)
                row = cursor.fetchone()
                written += int(row[0]) if row else 0
            write_s += time.perf_counter() - t2
        # (commit included in the total, not in the parts)
    elapsed = time.perf_counter() - started
    pending = pending_first_steps(at)
    reset(prefix)
    return {
        "occurrences": n,
        "batch": batch,
        "written": written,
        "pending_first_steps": pending,
        "s": elapsed,
        "claim_s": claim_s,
        "python_s": python_s,
        "statement_s": write_s,
    }


SQL_FLOOR = """
WITH c AS (
    SELECT sj.id, sj.job_id, sj.scheduled_for, j.owner_id, j.workflow, j.input, j.priority
    FROM scheduler_scheduledjob sj JOIN scheduler_job j ON j.id = sj.job_id
    WHERE sj.next_execution_at <= statement_timestamp() AND j.enabled
    ORDER BY sj.next_execution_at, sj.id LIMIT %(batch)s FOR UPDATE OF sj, j SKIP LOCKED
), runs AS (
    INSERT INTO scheduler_run (id, workflow, input, owner_id, priority, state, cancel_requested, observed,
                               job_id, correlation_id, error, created_at, updated_at, scheduled_for,
                               job_attempt, job_settled)
    SELECT sas_uuid7(), workflow, input, owner_id, priority, 'pending', false, false, job_id,
           'job:' || job_id, '', statement_timestamp(), statement_timestamp(), scheduled_for, 0, false
    FROM c
    RETURNING id, job_id, scheduled_for
), st AS (
    INSERT INTO scheduler_step (run_id, name, kind, seq, operation, process_state, failure_count, not_before,
                                idempotency_key, reached, timeout, queue_timeout, max_failures, backoff_base,
                                backoff_max, priority, attempts, payload, last_error, error_permanent,
                                created_at, updated_at)
    SELECT id, 'noop', 'forward', 0, 'bench.noop', 'pending', 0, statement_timestamp(), id::text || ':noop',
           false, '30s', '10s', 3, 1, 60, 0, 0, '{}'::jsonb, '', false, statement_timestamp(),
           statement_timestamp() FROM runs
){extra}, mv AS (
    UPDATE scheduler_scheduledjob sj
    SET scheduled_for = c.scheduled_for + interval '1 day',
        next_execution_at = c.scheduled_for + interval '1 day'
    FROM c WHERE sj.id = c.id
)
SELECT count(*) FROM runs
"""
SQL_FLOOR_BOOKKEEPING = """, h AS (
    INSERT INTO scheduler_taskexecutionhistory (kind, status, retry_count, worker, error, detail, started_at,
                                                run_id, job_id, scheduled_for)
    SELECT 'job', 'started', 0, 'floor', '', '{}', statement_timestamp(), id, job_id, scheduled_for FROM runs
), e AS (
    INSERT INTO scheduler_runevent (event_id, run_id, type, data, created_at)
    SELECT sas_uuid7(), id, 'received', '{}', statement_timestamp() FROM runs
)"""


def sql_floor(owner_ids: list[int], n: int, batch: int, prefix: str) -> dict[str, float]:
    """n occurrences due, written by one SQL statement per batch with no Python between (claim,
    run, first step, next row moved; and again with the job history row and the received
    event): what PostgreSQL alone needs on this machine for the rows a firing writes."""
    from django.db import connection

    out: dict[str, float] = {}
    for label, extra in (("lean", ""), ("full", SQL_FLOOR_BOOKKEEPING)):
        due_now(owner_ids, n, prefix)
        sql("ANALYZE")
        statement = SQL_FLOOR.replace("{extra}", extra)
        started, total = time.perf_counter(), 0
        while True:
            with connection.cursor() as cursor:
                cursor.execute(statement, {"batch": batch})
                k = int(cursor.fetchone()[0])
            total += k
            if k == 0:
                break
        out[label] = time.perf_counter() - started
        out[f"{label}_written"] = total
    reset(prefix)
    return out


def fire(owner_ids: list[int], n: int, batch: int, prefix: str) -> dict[str, Any]:
    """n occurrences due, fired by the dispatcher's own code (`jobs_dispatch`) in this process,
    with no worker running: what the dispatcher alone writes per second on this machine, beside
    the `floor` (one set-based statement per batch). The burst phase measures the same with the
    whole stack running."""
    from scheduler.services import jobs_dispatch

    at = due_now(owner_ids, n, prefix)
    sql("ANALYZE")
    started = time.perf_counter()
    ticks = 0
    fired = 0
    while True:
        done = jobs_dispatch(instance="bench-fire", batch=batch)
        ticks += 1
        fired += done.started
        if done.claimed == 0:
            break
    elapsed = time.perf_counter() - started
    pending = pending_first_steps(at)
    reset(prefix)
    return {
        "occurrences": n,
        "batch": batch,
        "started": fired,
        "pending_first_steps": pending,
        "ticks": ticks,
        "s": elapsed,
        "runs_per_s": fired / elapsed if elapsed else 0.0,
    }


def fire_k(owner_ids: list[int], n: int, batch: int, prefix: str, ks: list[int]) -> dict[str, Any]:
    """n occurrences due, fired by K dispatcher processes at once (`bench.jobs_dispatcher_proc`,
    each ticking over the shards it can lease, issue 20), for each K: the time from their common
    start to every run written, and each process's share."""
    import subprocess

    out: dict[str, Any] = {}
    for k in ks:
        at = due_now(owner_ids, n, prefix)
        sql("ANALYZE")
        start = time.time() + 8.0  # Django set up in every process first
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.jobs_dispatcher_proc",
                    "--name",
                    f"bench-k{k}-{i}",
                    "--start",
                    str(start),
                    "--batch",
                    str(batch),
                ],
                cwd=REPO,
                env=os.environ,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(k)
        ]
        written_at = None
        while written_at is None:
            time.sleep(0.05)
            if time.time() >= start and int(sql("SELECT count(*) FROM scheduler_run")[0][0]) >= n:
                written_at = time.time()
        reports = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
        out[str(k)] = {
            "s": written_at - start,
            "runs_per_s": n / (written_at - start),
            "shares": [r["started"] for r in reports],
            "pending_first_steps": pending_first_steps(at),
        }
        print(
            f"  K={k}: every run written in {written_at - start:.1f} s; shares {out[str(k)]['shares']}",
            flush=True,
        )
    reset(prefix)
    return out


# -- report ----------------------------------------------------------------------------------------


def load() -> str:
    """The machine's load average (it is shared: read the figures with it)."""
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} (1 / 5 min) at {datetime.now(UTC):%H:%M:%S} UTC"


def _lag_cell(s: dict[str, float]) -> str:
    return f"{fmt_ms(s['p50'])} / {fmt_ms(s['p99'])}" if s["n"] else "-"


def _verdict(value: float | None, target: float) -> str:
    if value is None or math.isnan(value):
        return "MISSED (none)"
    return "met" if value <= target else "MISSED"


def report_ours(r: dict[str, Any]) -> None:
    print_table(
        [
            ("jobs (written in)", f"{r['jobs']:,} ({r['fill_s']:.1f} s); {r['fill_check']}"),
            ("occurrences in the window / runs", f"{r['expected']:,} / {r['runs']:,}"),
            ("not started by the end", f"{r['not_started']:,}"),
            ("other history rows in the window", str(r["other_history"] or "none")),
            (
                f"lag to run written p50 / p99 (target p99 <= {TARGET_LAG_P99:.0f} s)",
                f"{_lag_cell(r['written'])} {_verdict(r['written']['p99'], TARGET_LAG_P99)}",
            ),
            ("lag to run started p50 / p99 (reported)", _lag_cell(r["started"])),
            (
                "edit -> first new occurrence: written / started late by",
                f"{_opt(r['edit']['written'])} / {_opt(r['edit']['started'])} "
                f"(edit {r['edit']['lead']:.1f} s before it; job_update {fmt_ms(r['edit']['update_s'])})",
            ),
        ]
    )


def _opt(v: float | None) -> str:
    return "never" if v is None else fmt_ms(v)


def report_beat(r: dict[str, Any]) -> None:
    e = r["edit"]
    print_table(
        [
            ("PeriodicTasks (written in)", f"{r['tasks']:,} ({r['fill_s']:.1f} s)"),
            ("occurrences in the window / never fired", f"{r['occurrences']:,} / {r['unfired']:,}"),
            ("lag to probe started p50 / p99", _lag_cell(r["lag"])),
            (
                "edit -> first new occurrence started late by",
                f"{_opt(e['started'])} (edit {e['lead']:.1f} s before it; beat saw the change after "
                f"{_opt(e['seen_by_beat_s'])})",
            ),
        ]
    )


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0 or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.1f}x"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000, help="jobs for the lag phase")
    parser.add_argument("--minutes", type=int, default=3, help="lag window at --jobs, whole minutes")
    parser.add_argument("--side-minutes", type=int, default=2, help="lag window of the side-by-side runs")
    parser.add_argument("--burst", type=int, default=100_000, help="occurrences due in the same second")
    parser.add_argument("--idle-sizes", type=int, nargs="+", default=[10_000, 1_000_000])
    parser.add_argument("--idle-reps", type=int, default=300)
    parser.add_argument("--beat-sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument(
        "--edit-lead", type=float, default=3.0, help="seconds between an edit and its occurrence"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=["idle", "side", "lag", "burst", "beat", "floor", "fire", "sqlfloor", "firek", "ontime"],
        help="beat: the baseline alone",
    )
    parser.add_argument(
        "--drain-cap", type=float, default=900, help="seconds to wait for the burst's runs to complete"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy the dispatcher during the burst; cProfile the dispatchers' ticks in the lag phase",
    )
    parser.add_argument(
        "--dispatchers", type=int, default=1, help="dispatcher workers (1 process each), lag and side phases"
    )
    parser.add_argument("--ontime", type=int, default=20, help="occurrences in the ontime phase")
    parser.add_argument("--ontime-spacing", type=float, default=1.5, help="seconds between them")
    parser.add_argument("--ontime-beat", type=float, default=60.0, help="seconds between beat sends")
    parser.add_argument("--fire-batch", type=int, default=1000, help="rows per transaction in the fire phase")
    parser.add_argument("--quick", action="store_true", help="small sizes: check that the script runs")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.minutes, args.side_minutes, args.burst = 2_000, 1, 1, 2_000
        args.idle_sizes, args.idle_reps, args.beat_sizes = [1_000, 20_000], 50, [300]
    phases = args.only or ["idle", "side", "lag", "burst", "floor"]

    # The bench's workflow and tasks, in this process and in every worker it starts (the
    # scheduler app imports these modules when Django starts; scheduler/apps.py).
    os.environ["SAS_WORKFLOW_MODULES"] = "bench.jobs_tasks"
    env = bench_environment()

    logs = log_dir()
    print(f"logs in {logs}", flush=True)
    owner_ids = bench_owners(OWNERS)
    out: dict[str, Any] = {}
    analyzer = autoanalyze().__enter__()
    try:
        if "idle" in phases:
            print("\n== the dispatcher's tick with nothing due", flush=True)
            print("  " + load(), flush=True)
            out["idle"] = idle_cost(owner_ids, args.idle_sizes, args.idle_reps, env["SAS_REDIS_PREFIX"])
            small, big = (out["idle"][str(n)] for n in (min(args.idle_sizes), max(args.idle_sizes)))
            print_table(
                [
                    (
                        f"idle tick at {n['jobs']:,} jobs p50 / p99",
                        f"{fmt_ms(n['tick']['p50'])} / {fmt_ms(n['tick']['p99'])}",
                    )
                    for n in out["idle"].values()
                ]
                + [("big : small p50 (flat = ~1)", f"{big['tick']['p50'] / small['tick']['p50']:.2f}")]
            )
            for n, r in out["idle"].items():
                for p in r["plans"]:
                    print(f"  plan at {int(n):,} jobs: {p['statement'][:120]}...")
                    print("\n".join("    " + line for line in p["plan"]))
        if "side" in phases:
            out["side"] = {}
            for n in args.beat_sizes:
                print(f"\n== side by side at {n:,}: ours", flush=True)
                print("  " + load(), flush=True)
                ours = lag_ours(
                    env, n, args.side_minutes, args.edit_lead, owner_ids, logs, dispatchers=args.dispatchers
                )
                report_ours(ours)
                print(f"\n== side by side at {n:,}: django-celery-beat DatabaseScheduler", flush=True)
                print("  " + load(), flush=True)
                beat = lag_beat(env, n, args.side_minutes, args.edit_lead, logs)
                report_beat(beat)
                out["side"][str(n)] = {"ours": ours, "beat": beat}
            print("\n== ratios (django-celery-beat : ours; > 1 means ours is faster)")
            rows = []
            for n, r in out["side"].items():
                o, b = r["ours"], r["beat"]
                rows += [
                    (
                        f"{int(n):,}: lag p50 (beat to probe started : ours to run started)",
                        ratio(b["lag"]["p50"], o["started"]["p50"]),
                    ),
                    (f"{int(n):,}: lag p99", ratio(b["lag"]["p99"], o["started"]["p99"])),
                    (
                        f"{int(n):,}: lag p50 (: ours to run written)",
                        ratio(b["lag"]["p50"], o["written"]["p50"]),
                    ),
                    (
                        f"{int(n):,}: edit's first occurrence late by",
                        ratio(b["edit"]["started"], o["edit"]["started"]),
                    ),
                ]
            print_table(rows)
        if "beat" in phases:
            out["beat"] = {}
            for n in args.beat_sizes:
                print(f"\n== django-celery-beat DatabaseScheduler at {n:,}", flush=True)
                print("  " + load(), flush=True)
                out["beat"][str(n)] = lag_beat(env, n, args.side_minutes, args.edit_lead, logs)
                report_beat(out["beat"][str(n)])
        if "floor" in phases:
            print(
                f"\n== floor: {args.burst:,} occurrences written set-based (not the engine's code)",
                flush=True,
            )
            for size in (500, 5000):
                f = floor(owner_ids, args.burst, size, env["SAS_REDIS_PREFIX"])
                out.setdefault("floor", {})[str(size)] = f
                print_table(
                    [
                        (
                            f"batches of {size:,}: written / first steps Pending",
                            f"{f['written']:,} / {f['pending_first_steps']:,} in {f['s']:.1f} s "
                            f"({f['written'] / f['s']:,.0f} runs/s; claim {f['claim_s']:.1f} s, Python "
                            f"{f['python_s']:.1f} s, the one statement {f['statement_s']:.1f} s, "
                            "rest: commits)",
                        )
                    ]
                )
        if "fire" in phases:
            print(f"\n== fire: {args.burst:,} occurrences by the dispatcher's code, no workers", flush=True)
            print("  " + load(), flush=True)
            f = fire(owner_ids, args.burst, int(args.fire_batch), env["SAS_REDIS_PREFIX"])
            out["fire"] = f
            print_table(
                [
                    (
                        f"batches of {f['batch']:,}: started / first steps Pending",
                        f"{f['started']:,} / {f['pending_first_steps']:,} in {f['s']:.1f} s "
                        f"({f['runs_per_s']:,.0f} runs/s, {f['ticks']} ticks)",
                    )
                ]
            )
        if "sqlfloor" in phases:
            print(
                f"\n== SQL floor: {args.burst:,} occurrences, one statement per 1,000, no Python", flush=True
            )
            print("  " + load(), flush=True)
            f = sql_floor(owner_ids, args.burst, 1000, env["SAS_REDIS_PREFIX"])
            out["sqlfloor"] = f
            print_table(
                [
                    ("run + first step + next row moved", f"{f['lean_written']:,.0f} in {f['lean']:.1f} s"),
                    (
                        "... + job history row + received event",
                        f"{f['full_written']:,.0f} in {f['full']:.1f} s",
                    ),
                ]
            )
        if "firek" in phases:
            print(
                f"\n== {args.burst:,} occurrences due at once, fired by K = 1, 2, 3 dispatcher processes "
                "(shards), no workers",
                flush=True,
            )
            print("  " + load(), flush=True)
            out["firek"] = fire_k(
                owner_ids, args.burst, int(args.fire_batch), env["SAS_REDIS_PREFIX"], [1, 2, 3]
            )
            floor_s = out.get("sqlfloor", {}).get("full")
            if floor_s:
                best = min(r["s"] for r in out["firek"].values())
                print(f"  best K : SQL floor (full) = {best:.1f} s : {floor_s:.1f} s = {best / floor_s:.2f}x")
        if "ontime" in phases:
            print(
                f"\n== on time: {args.ontime} occurrences between beat sends {args.ontime_beat:.0f} s apart",
                flush=True,
            )
            print("  " + load(), flush=True)
            o = on_time(
                env, owner_ids, logs, n=args.ontime, spacing=args.ontime_spacing, beat_every=args.ontime_beat
            )
            out["ontime"] = o
            print_table(
                [
                    ("occurrences / written / early", f"{o['occurrences']} / {o['written']} / {o['early']}"),
                    (
                        "lag to run written p50 / p99 / max (target: within 200 ms, quiet machine)",
                        f"{_lag_cell(o['lag'])} / {_opt(o['max'])}",
                    ),
                    ("beat sends in the phase", f"{o['beat_sends']} ({o['beat_every']:.0f} s apart)"),
                ]
            )
            print("  " + load(), flush=True)
        if "lag" in phases:
            print(f"\n== dispatch lag at {args.jobs:,} jobs over {args.minutes} min", flush=True)
            print("  " + load(), flush=True)
            out["lag"] = lag_ours(
                env,
                args.jobs,
                args.minutes,
                args.edit_lead,
                owner_ids,
                logs,
                dispatchers=args.dispatchers,
                profile=args.profile,
            )
            if out["lag"].get("profile"):
                print(f"  dispatcher cProfile (all ticks of the window): {out['lag']['profile']}")
            report_ours(out["lag"])
        if "burst" in phases:
            print(f"\n== burst of {args.burst:,} occurrences due in the same second", flush=True)
            print("  " + load(), flush=True)
            r = burst(env, args.burst, owner_ids, logs, profile=args.profile, drain_cap=args.drain_cap)
            out["burst"] = r
            print_table(
                [
                    (
                        f"every run written, first step Pending (target <= {TARGET_BURST_WRITTEN:.0f} s)",
                        f"{r['all_written_s']:.1f} s {_verdict(r['all_written_s'], TARGET_BURST_WRITTEN)} "
                        f"(created_at: first {r['db_first_written_s']:.2f} s, "
                        f"last {r['db_last_written_s']:.2f} s; "
                        f"{r['first_steps']:,} first steps)",
                    ),
                    (
                        "every run completed",
                        f"{r['all_completed_s']:.1f} s ({r['not_completed']} ended otherwise)"
                        if r["all_completed_s"] is not None
                        else f"not within --drain-cap: {r['completed']:,} of {r['jobs']:,} completed; at the "
                        f"rate below all would take ~{r['jobs'] / max(r['drain_steps_per_s'], 1e-9):.0f} s",
                    ),
                    ("steps/s (first claim -> last completed)", f"{r['drain_steps_per_s']:.0f}"),
                ]
                + ([("dispatcher profile (py-spy raw)", r["profile"])] if r["profile"] else [])
            )
    finally:
        analyzer.__exit__()
        out["autoanalyze"] = [(round(t), name) for t, name in analyzer.analyzed]
        print(f"\n(autovacuum's ANALYZE done by the bench: {len(analyzer.analyzed)} times)")
        reset(env["SAS_REDIS_PREFIX"])
        if args.json:
            args.json.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()

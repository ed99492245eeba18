"""Issue 30's pause benchmark: "a pause taking effect (target <= 1 s) with ten other customers
running", and what pauses cost the jobs dispatcher's tick.

    SAS_BENCH_DB=sasbench_pause python bench/pause.py [--customers 10] [--rate 2] [--delay-ms 100]
        [--pauses 10] [--held 3] [--gap 3] [--jobs 1000] [--reps 5] [--only tick live] [--json FILE]

1. **tick** (database only, before any worker starts): `--jobs` every-minute jobs of one customer
   due at once, fired by one dispatcher tick (`jobs_dispatch`, in this process), `--reps` times in
   each of three set-ups, interleaved: *before* (the triggers `scheduled_hold_if_paused_*` disabled:
   the dispatcher as it was before pauses held job occurrences), *no pause* (the trigger's probe
   of an empty scheduler_pause per statement), *another paused* (a second customer with
   `--jobs` jobs paused: each row written asks whether its job is paused). Also an idle tick
   (nothing due) in each. Printed: median per tick, per occurrence, ratios to *before*.
2. **live**: real processes as the Procfile lays them out for this path (control: claims and the
   supervisor; agents-http, 8 threads; beat; the simulator's /echo). `--customers` other
   customers and one more, the paused one, each submit an http.call run (one step, a
   `--delay-ms` call) `--rate` times a second, all the time. `--pauses` times: pause the one
   customer (`pause_create`), keep it paused `--held` s, resume, wait `--gap` s. A pause's
   *effect* is the time from just before `pause_create` (the database's clock) to the last
   attempt of the paused customer's steps dispatched (its history row's start: the claim) -
   0 when none was. Printed: p50 / p99 / max of the effect (target <= 1 s), the paused
   customer's attempts started later than the pause's commit, and the other customers'
   dispatches per second while one is paused and while none is (their ratio: unaffected is ~1).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, log_dir, percentile, truncate_engine

TRIGGERS = ("scheduled_hold_if_paused_insert", "scheduled_hold_if_paused_update")
SETUPS = ("before", "no pause", "another paused")


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def reset() -> None:
    truncate_engine()
    sql("TRUNCATE scheduler_job, scheduler_scheduledjob, scheduler_pause CASCADE")
    triggers("ENABLE")


def triggers(state: str) -> None:
    for name in TRIGGERS:
        sql(f"ALTER TABLE scheduler_scheduledjob {state} TRIGGER {name}")


def users(names: list[str]) -> list[int]:
    from django.contrib.auth import get_user_model

    return [get_user_model().objects.get_or_create(username=n)[0].pk for n in names]


# -- 1. the dispatcher's tick ----------------------------------------------------------------


def make_jobs(owner_id: int, n: int, prefix: str, url: str) -> None:
    """`n` every-minute http.call jobs (their runs are written, never run: no worker yet)."""
    from agents.http_call import HTTP_CALL_WORKFLOW
    from scheduler.services import job_create

    for i in range(n):
        job_create(
            by_staff=False,
            owner_id=owner_id,
            name=f"{prefix}-{i}",
            workflow=HTTP_CALL_WORKFLOW,
            input={"method": "POST", "url": url, "body": {}},
            cron="* * * * *",
        )


def tick_bench(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from scheduler.models import Pause
    from scheduler.services import jobs_dispatch, pause_create, pause_resume

    reset()
    busy, paused = users(["pause-bench-busy", "pause-bench-paused"])
    url = f"{env['SIMULATOR_URL']}/echo"
    make_jobs(busy, args.jobs, "busy", url)
    make_jobs(paused, args.jobs, "paused", url)
    fire: dict[str, list[float]] = {s: [] for s in SETUPS}
    idle: dict[str, list[float]] = {s: [] for s in SETUPS}
    for rep in range(args.reps):
        for setup in SETUPS:
            truncate_engine()
            Pause.objects.all().delete()
            # The other customer's jobs: a day away (not due in any set-up; held when paused).
            sql(
                "UPDATE scheduler_scheduledjob"
                " SET scheduled_for = date_trunc('minute', now()) + interval '1 day',"
                " next_execution_at = date_trunc('minute', now()) + interval '1 day'"
                " WHERE job_id IN (SELECT id FROM scheduler_job WHERE owner_id = %s)",
                [paused],
            )
            triggers("DISABLE" if setup == "before" else "ENABLE")
            pause = None
            if setup == "another paused":
                pause = pause_create(owner_id=paused, reason="bench", by="bench")
            # Every job of the busy customer due at this minute: on time, one occurrence each.
            sql(
                "UPDATE scheduler_scheduledjob SET scheduled_for = date_trunc('minute', now()),"
                " next_execution_at = date_trunc('minute', now())"
                " WHERE job_id IN (SELECT id FROM scheduler_job WHERE owner_id = %s)",
                [busy],
            )
            sql("ANALYZE scheduler_scheduledjob")
            t = time.perf_counter()
            done = jobs_dispatch(instance="bench")
            fire[setup].append(time.perf_counter() - t)
            if done.started != args.jobs:
                raise RuntimeError(f"{setup}: {done.started} started of {args.jobs}")
            for _ in range(10):
                t = time.perf_counter()
                jobs_dispatch(instance="bench")
                idle[setup].append(time.perf_counter() - t)
            if pause is not None:
                pause_resume(pause_id=pause.pk)
        print(f"  tick rep {rep + 1}/{args.reps} done", flush=True)
    writes = trigger_writes(busy, paused, args.reps * 4)
    triggers("ENABLE")
    base_fire = statistics.median(fire["before"])
    base_idle = statistics.median(idle["before"])
    out: dict[str, Any] = {"jobs": args.jobs, "reps": args.reps, "setups": {}}
    base_write = statistics.median(writes["before"])
    print(f"\nDispatcher tick firing {args.jobs} due occurrences (median of {args.reps}), and an idle tick:")
    for setup in SETUPS:
        f, i = statistics.median(fire[setup]), statistics.median(idle[setup])
        w = statistics.median(writes[setup])
        out["setups"][setup] = {
            "fire_s": f,
            "fire_min_s": min(fire[setup]),
            "per_occurrence_us": f / args.jobs * 1e6,
            "fire_ratio": f / base_fire,
            "idle_ms": i * 1000,
            "idle_ratio": i / base_idle,
            "fire_all_s": fire[setup],
            "rows_write_ms": w * 1000,
            "rows_write_ratio": w / base_write,
        }
        print(
            f"  {setup:15s} fire {f * 1000:8.1f} ms (min {min(fire[setup]) * 1000:7.1f}; "
            f"{f / args.jobs * 1e6:6.1f} us/occurrence, x{f / base_fire:.3f} of before)   "
            f"idle {i * 1000:6.2f} ms (x{i / base_idle:.3f})"
        )
    print(f"\nThe trigger alone: one UPDATE of the due time of {args.jobs} rows, the tick's write (median):")
    for setup in SETUPS:
        w = statistics.median(writes[setup])
        print(
            f"  {setup:15s} {w * 1000:7.2f} ms ({(w - base_write) / args.jobs * 1e6:+6.2f} us/row, "
            f"x{w / base_write:.3f} of before)"
        )
    return out


def trigger_writes(busy: int, paused: int, reps: int) -> dict[str, list[float]]:
    """The cost of the trigger on the statement that moves the busy customer's next rows on
    (as `scheduled_next_advance` does each tick), in a transaction rolled back: `reps` times per
    set-up, interleaved."""
    from django.db import connection, transaction

    from scheduler.models import Pause

    out: dict[str, list[float]] = {s: [] for s in SETUPS}
    Pause.objects.all().delete()
    for _ in range(reps):
        for setup in SETUPS:
            with transaction.atomic():
                triggers("DISABLE" if setup == "before" else "ENABLE")
                if setup == "another paused":
                    Pause.objects.create(scope=Pause.Scope.OWNER, owner_id=paused, reason="b", paused_by="b")
                with connection.cursor() as cursor:
                    t = time.perf_counter()
                    cursor.execute(
                        "UPDATE scheduler_scheduledjob"
                        " SET next_execution_at = scheduled_for + interval '1 minute'"
                        " WHERE job_id IN (SELECT id FROM scheduler_job WHERE owner_id = %s)",
                        [busy],
                    )
                    out[setup].append(time.perf_counter() - t)
                transaction.set_rollback(True)
    return out


# -- 2. a pause taking effect, live ----------------------------------------------------------


def start_stack(env: dict[str, str], logs: Path) -> list[Any]:
    from sastools.harness import celery_beat, celery_worker, simulator_process

    procs: list[Any] = []

    def add(proc: Any, marker: str) -> None:
        procs.append(proc)
        proc.start(ready_marker=marker, timeout=180)

    try:
        add(simulator_process(url=env["SIMULATOR_URL"], log_dir=logs, env=env), "SIMULATOR_LISTENING")
        add(
            celery_worker(
                name="control", queues="scheduler,supervisor,default", log_dir=logs, env=env, concurrency=1
            ),
            " ready.",
        )
        http = celery_worker(
            name="agents-http",
            queues="agent.http",
            log_dir=logs,
            env={**env, "DATABASE_POOL_MAX_SIZE": "2"},
            concurrency=8,
            pool="threads",
        )
        add(http, " ready.")
        add(celery_beat(log_dir=logs, env=env), "beat: Starting")
    except BaseException:
        for proc in reversed(procs):
            proc.stop()
        raise
    return procs


class Submitter(threading.Thread):
    """One customer submitting an http.call run `rate` times a second until stopped."""

    def __init__(self, owner_id: int, url: str, rate: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.owner_id, self.url, self.rate, self.stop = owner_id, url, rate, stop
        self.submitted = 0
        self.errors = 0

    def run(self) -> None:
        from django.db import connection

        from agents.http_call import HTTP_CALL_WORKFLOW
        from scheduler.services import run_submit

        gap = 1.0 / self.rate
        following = time.monotonic()
        try:
            while not self.stop.is_set():
                try:
                    run_submit(
                        workflow=HTTP_CALL_WORKFLOW,
                        input={"method": "POST", "url": self.url, "body": {}},
                        owner_id=self.owner_id,
                    )
                    self.submitted += 1
                except Exception:
                    self.errors += 1
                following += gap
                self.stop.wait(max(0.0, following - time.monotonic()))
        finally:
            connection.close()


def db_now() -> Any:
    return sql("SELECT statement_timestamp()")[0][0]


def attempts(owner_ids: list[int], start: Any, end: Any) -> list[Any]:
    """Start times of the owners' step attempts (the claim writes the row) in [start, end)."""
    return [
        r[0]
        for r in sql(
            "SELECT h.started_at FROM scheduler_taskexecutionhistory AS h JOIN scheduler_run AS r"
            " ON r.id = h.run_id WHERE h.kind = 'attempt' AND r.owner_id = ANY(%s)"
            " AND h.started_at >= %s AND h.started_at < %s",
            [owner_ids, start, end],
        )
    ]


def live_bench(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    from scheduler.services import pause_create, pause_resume

    reset()
    target, *others = users(
        ["pause-bench-target", *[f"pause-bench-other-{i}" for i in range(args.customers)]]
    )
    url = f"{env['SIMULATOR_URL']}/echo?delay_ms={args.delay_ms}"
    logs = log_dir()
    print(f"\nlive: logs in {logs}", flush=True)
    procs = start_stack(env, logs)
    stop = threading.Event()
    subs = [Submitter(target, url, args.target_rate or args.rate, stop)]
    subs += [Submitter(owner, url, args.rate, stop) for owner in others]
    released_steps: list[int] = []
    effects: list[float] = []
    late: list[int] = []
    windows: list[tuple[Any, Any, Any, Any]] = []
    try:
        for s in subs:
            s.start()
        time.sleep(10)  # warm up: every customer's work flowing
        for i in range(args.pauses):
            before = db_now()
            pause = pause_create(owner_id=target, reason="bench", by="bench")
            committed = db_now()
            time.sleep(args.held)
            resumed_at = db_now()
            dispatched = attempts([target], before, resumed_at)
            last = max(dispatched, default=before)
            effects.append((last - before).total_seconds())
            late.append(sum(1 for t in dispatched if t > committed))
            released_steps.append(pause_resume(pause_id=pause.pk).released)
            after = db_now()
            time.sleep(args.gap)
            windows.append((committed, resumed_at, after, db_now()))
            print(
                f"  pause {i + 1}/{args.pauses}: last dispatch of the paused customer "
                f"{effects[-1] * 1000:.0f} ms after the pause began ({len(dispatched)} in the pause, "
                f"{late[-1]} after its commit)",
                flush=True,
            )
    finally:
        stop.set()
        for s in subs:
            s.join(10)
        for proc in reversed(procs):
            proc.stop()
    paused_s = sum((r - c).total_seconds() for c, r, _, _ in windows)
    free_s = sum((e - a).total_seconds() for _, _, a, e in windows)
    in_pause = sum(len(attempts(others, c, r)) for c, r, _, _ in windows)
    outside = sum(len(attempts(others, a, e)) for _, _, a, e in windows)
    target_outside = sum(len(attempts([target], a, e)) for _, _, a, e in windows)
    target_free_rate = target_outside / free_s if free_s else float("nan")
    others_paused_rate = in_pause / paused_s if paused_s else float("nan")
    others_free_rate = outside / free_s if free_s else float("nan")
    result = {
        "customers": args.customers,
        "rate": args.rate,
        "delay_ms": args.delay_ms,
        "pauses": args.pauses,
        "effect_s": effects,
        "effect_p50_s": percentile(effects, 0.5),
        "effect_p99_s": percentile(effects, 0.99),
        "effect_max_s": max(effects),
        "dispatched_after_commit": late,
        "others_dispatch_per_s_while_paused": others_paused_rate,
        "others_dispatch_per_s_otherwise": others_free_rate,
        "target_dispatch_per_s_otherwise": target_free_rate,
        "target_steps_released_per_resume": released_steps,
        "submit_errors": sum(s.errors for s in subs),
        "submitted": sum(s.submitted for s in subs),
    }
    print(
        f"\nA pause taking effect ({args.pauses} pauses of {args.held:g} s, {args.customers} other "
        f"customers submitting {args.rate:g} runs/s each, the paused one "
        f"{args.target_rate or args.rate:g}/s, {args.delay_ms} ms calls):"
    )
    print(
        f"  effect p50 {result['effect_p50_s'] * 1000:.0f} ms, p99 {result['effect_p99_s'] * 1000:.0f} ms, "
        f"max {result['effect_max_s'] * 1000:.0f} ms - target <= 1 s: "
        f"{'met' if result['effect_max_s'] <= 1.0 else 'MISSED'}"
    )
    print(f"  paused customer's attempts dispatched after the pause's commit: {late} (sum {sum(late)})")
    print(
        f"  the paused customer's dispatches outside its pauses: {target_free_rate:.1f}/s; its held "
        f"steps released at each resume: {released_steps}"
    )
    print(
        f"  other customers' dispatches: {others_paused_rate:.1f}/s while one is paused, "
        f"{others_free_rate:.1f}/s otherwise (ratio {others_paused_rate / others_free_rate:.2f}); "
        f"runs submitted {result['submitted']}, submit errors {result['submit_errors']}"
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--customers", type=int, default=10, help="other customers running")
    parser.add_argument("--rate", type=float, default=2.0, help="runs a second per customer")
    parser.add_argument(
        "--target-rate", type=float, default=0.0, help="runs a second of the paused customer (default --rate)"
    )
    parser.add_argument("--delay-ms", type=int, default=100)
    parser.add_argument("--pauses", type=int, default=10)
    parser.add_argument("--held", type=float, default=3.0, help="seconds each pause lasts")
    parser.add_argument("--gap", type=float, default=3.0, help="seconds between a resume and the next pause")
    parser.add_argument("--jobs", type=int, default=1000, help="due occurrences a measured tick fires")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--only", nargs="*", choices=("tick", "live"), default=["tick", "live"])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    env = bench_environment()
    env["PYTHONUNBUFFERED"] = "1"
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    if "tick" in args.only:
        result["tick"] = tick_bench(args, env)
    if "live" in args.only:
        result["live"] = live_bench(args, env)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()

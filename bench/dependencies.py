"""Dependencies between jobs (issue 30): chains A -> B -> C on a one-minute cron, two dispatchers.

    python bench/dependencies.py [--chains 1000] [--independent 1000] [--owners 100] [--minutes 2]
        [--quick]

Real processes, as bench/jobs.py lays them out (`start_ours`): celery beat with the project's
scheduler (the dispatcher's tick every SAS["JOBS_DISPATCH_INTERVAL"] s, the sweep, the scheduler's
tick), two dispatcher workers (-Q jobs -c 1 each), one control worker, one agent worker running the
bench's one-step no-op workflow (bench/jobs_tasks.py). Two runs, in this order, each over
--minutes whole minutes (the stack restarted between them, the chains added meanwhile):

  without  --independent jobs every minute ("* * * * *"), spread over --owners users;
  with     the same independent jobs, plus --chains chains over the same users: A every minute, B
           waits for A (on success), C for B - B and C are one-off jobs with parents and no run
           time, so they run only after their parent (`job_create(..., parents=...)`).

Figures (database clock throughout):
  dependent run written  a parent's run ended (`Run.finished_at`) -> its child's run for the same
                         logical time written (`Run.created_at`): A -> B and B -> C, p50 / p99 /
                         max (target p99 <= 1 s). It is the settle's latency: the dispatcher
                         settles ended runs at every tick (beat: every second) and the child's run
                         is written in the same tick.
  independent lag        an independent occurrence's cron time -> its run written, p50 / p99, in
                         each run, and their ratio (what the chains cost the others).
  exactly once           every (job, logical time) has one run; every A occurrence in the window
                         has its B and its C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SAS_BENCH_DB", "benchdeps")

from bench.common import fmt_ms, log_dir, print_table, summary

TARGET_P99 = 1.0


def make_jobs(owner_ids: list[int], *, chains: int, independent: int) -> dict[str, list[int]]:
    """Through the job service, as customers make them (`job_create`)."""
    from bench.jobs_tasks import NOOP_WORKFLOW
    from scheduler.services.jobs import job_create

    def create(owner: int, name: str, **kw: Any) -> int:
        return job_create(
            owner_id=owner, by_staff=False, name=name, workflow=NOOP_WORKFLOW, input={}, **kw
        ).pk

    made: dict[str, list[int]] = {"independent": [], "a": [], "b": [], "c": []}
    for i in range(independent):
        made["independent"].append(
            create(owner_ids[i % len(owner_ids)], f"ind-{i}", cron="* * * * *", overlap_policy="allow_all")
        )
    for i in range(chains):
        owner = owner_ids[i % len(owner_ids)]
        a = create(owner, f"a-{i}", cron="* * * * *", overlap_policy="allow_all")
        b = create(owner, f"b-{i}", parents=[{"job": a}], overlap_policy="allow_all")
        c = create(owner, f"c-{i}", parents=[{"job": b}], overlap_policy="allow_all")
        made["a"].append(a)
        made["b"].append(b)
        made["c"].append(c)
    return made


def _runs(job_ids: list[int], start: datetime, end: datetime) -> dict[tuple[int, datetime], list[Any]]:
    from bench.jobs import sql

    rows = sql(
        "SELECT job_id, scheduled_for, created_at, finished_at FROM scheduler_run "
        "WHERE job_id = ANY(%s) AND scheduled_for >= %s AND scheduled_for < %s",
        [job_ids, start, end],
    )
    out: dict[tuple[int, datetime], list[Any]] = {}
    for job_id, t, created, finished in rows:
        out.setdefault((job_id, t), []).append((created, finished))
    return out


def measure(made: dict[str, list[int]], start: datetime, end: datetime, *, cap: float) -> dict[str, Any]:
    """Wait for the window's chains to finish (or `cap` seconds), then the figures."""
    from bench.common import wait_until
    from bench.jobs import sql

    minutes = int((end - start).total_seconds() // 60)
    expected = len(made["a"]) * minutes

    def c_written() -> bool:
        if not made["c"]:
            return True
        ((n,),) = sql(
            "SELECT count(*) FROM scheduler_run WHERE job_id = ANY(%s) AND scheduled_for >= %s "
            "AND scheduled_for < %s AND finished_at IS NOT NULL",
            [made["c"], start, end],
        )
        return int(n) >= expected

    try:
        wait_until(c_written, timeout=cap, interval=2.0, what="every chain of the window to end")
    except RuntimeError as exc:  # reported with what did end (missing children counted)
        print(f"  {exc}", flush=True)
    ind = _runs(made["independent"], start, end)
    lag = [(v[0][0] - t).total_seconds() for (_, t), v in ind.items()]
    a, b, c = (_runs(made[k], start, end) for k in ("a", "b", "c"))
    child_of = dict(zip(made["a"], made["b"], strict=True)) | dict(zip(made["b"], made["c"], strict=True))
    written = []
    missing = 0
    for parents in (a, b):
        for (job_id, t), runs in parents.items():
            child = (child_of[job_id], t)
            theirs = b.get(child) if job_id in made["a"] else c.get(child)
            if not theirs or runs[0][1] is None:
                missing += 1
                continue
            written.append((theirs[0][0] - runs[0][1]).total_seconds())
    doubled = sum(1 for group in (ind, a, b, c) for v in group.values() if len(v) > 1)
    return {
        "independent_lag": summary(lag) if lag else {},
        "independent_runs": len(lag),
        "dependent_written": {**summary(written), "max": max(written)} if written else {},
        "dependent_runs": len(written),
        "chains_expected": expected,
        "a_runs": len(a),
        "missing": missing,
        "doubled": doubled,
    }


def one_run(
    env: dict[str, str], logs: Path, tag: str, args: argparse.Namespace, made: dict[str, list[int]]
) -> dict[str, Any]:
    """Start the stack, measure one window of whole minutes, stop it."""
    from bench.jobs import db_now, sleep_until, start_ours

    stack = start_ours(env, logs, tag, dispatchers=2)
    try:
        now = db_now()
        # The window: whole minutes from the first boundary at least two minutes away (a
        # restarted stack's first tick fires what came due while it was down, and the runs of
        # that burst end meanwhile: not in the window).
        start = (now + timedelta(seconds=125)).replace(second=0, microsecond=0)
        end = start + timedelta(minutes=args.minutes)
        print(f"  {tag}: window {start:%H:%M:%S} - {end:%H:%M:%S} UTC", flush=True)
        sleep_until(time.time() + (end - db_now()).total_seconds() + 5)
        return measure(made, start, end, cap=args.cap)
    finally:
        stack.stop()


def report(out: dict[str, Any]) -> None:
    rows: list[tuple[str, Any]] = []
    w = out["with"]
    dw = w["dependent_written"]
    if dw:
        verdict = "meets" if dw["p99"] <= TARGET_P99 else "MISSES"
        rows.append(
            (
                f"parent ended -> dependent run written ({w['dependent_runs']:,} runs) p50 / p99 / max",
                f"{fmt_ms(dw['p50'])} / {fmt_ms(dw['p99'])} / {fmt_ms(dw['max'])} ({verdict} p99 <= 1 s)",
            )
        )
    for name in ("without", "with"):
        lag = out[name]["independent_lag"]
        if lag:
            rows.append(
                (
                    f"independent lag {name} chains ({out[name]['independent_runs']:,} runs) p50 / p99",
                    f"{fmt_ms(lag['p50'])} / {fmt_ms(lag['p99'])}",
                )
            )
    a, b = out["without"]["independent_lag"], w["independent_lag"]
    if a and b:
        rows.append(
            (
                "independent lag with : without, p50 / p99",
                f"{b['p50'] / a['p50']:.2f} / {b['p99'] / a['p99']:.2f}",
            )
        )
    doubled = w["doubled"] + out["without"]["doubled"]
    rows.append(
        (
            "chains: A occurrences / expected / missing a child / doubled runs",
            f"{w['a_runs']} / {w['chains_expected']} / {w['missing']} / {doubled}",
        )
    )
    print_table(rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--chains", type=int, default=1000)
    parser.add_argument("--independent", type=int, default=1000)
    parser.add_argument("--owners", type=int, default=100)
    parser.add_argument("--minutes", type=int, default=2)
    parser.add_argument("--cap", type=float, default=300, help="seconds to wait for the chains to end")
    parser.add_argument("--quick", action="store_true", help="100 chains, 100 independent, 1 minute")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.chains, args.independent, args.minutes = 100, 100, 1
    os.environ["SAS_WORKFLOW_MODULES"] = "bench.jobs_tasks"
    from bench.common import bench_environment

    env = bench_environment()
    logs = log_dir()
    print(f"logs in {logs}", flush=True)
    from bench.jobs import bench_owners, reset

    reset(env["SAS_REDIS_PREFIX"])
    owner_ids = bench_owners(args.owners)
    out: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    t0 = time.time()
    made = make_jobs(owner_ids, chains=0, independent=args.independent)
    print(f"  {args.independent:,} independent jobs made in {time.time() - t0:.1f} s", flush=True)
    out["without"] = one_run(env, logs, "without", args, made)
    t0 = time.time()
    chains = make_jobs(owner_ids, chains=args.chains, independent=0)
    made = {**chains, "independent": made["independent"]}
    print(f"  {args.chains:,} chains ({3 * args.chains:,} jobs) made in {time.time() - t0:.1f} s", flush=True)
    out["with"] = one_run(env, logs, "with", args, made)
    report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()

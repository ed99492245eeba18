"""Dependencies between jobs (issue 30): chains A -> B -> C on a one-minute cron, two dispatchers.

    python bench/dependencies.py [--chains 1000] [--independent 1000] [--owners 100] [--minutes 2]
        [--agents 1] [--in-flight N] [--floor] [--quick]

Real processes, as bench/jobs.py lays them out (`start_ours`): celery beat with the project's
scheduler (the dispatcher's tick every SAS["JOBS_DISPATCH_INTERVAL"] s, the sweep, the scheduler's
tick), two dispatcher workers (-Q jobs -c 1 each), one control worker, --agents agent workers (8
threads each) running the bench's one-step no-op workflow (bench/jobs_tasks.py). Two runs, in this
order, each over --minutes whole minutes (the stack restarted between them, the chains added
meanwhile):

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
  engine                 runs written and ended a minute in each window, and its backlog at the
                         end (each window starts with an empty engine). With --floor, a third
                         window runs as many runs a minute with no dependency (the chains' jobs
                         off, 3 x --chains more independent ones): when the engine cannot keep up,
                         its ended rate is the floor the chains are measured against.

The hop is split at its gate (written by the settle of the parent's run): parent ended -> gate
(waiting for a tick and its settle), gate -> child's run (firing its queued row); and by whether
the parent ended while its minute's burst was still being fired.
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


def make_jobs(
    owner_ids: list[int], *, chains: int, independent: int, prefix: str = "ind"
) -> dict[str, list[int]]:
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
            create(
                owner_ids[i % len(owner_ids)], f"{prefix}-{i}", cron="* * * * *", overlap_policy="allow_all"
            )
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


def _gates(child_ids: list[int], start: datetime, end: datetime) -> dict[tuple[int, datetime], datetime]:
    """When each child's gate was written: the settle of its parent's run (its transaction's
    statement clock), the middle of a hop."""
    from bench.jobs import sql

    rows = sql(
        "SELECT child_id, logical_time, created_at FROM scheduler_dependencygate "
        "WHERE child_id = ANY(%s) AND logical_time >= %s AND logical_time < %s",
        [child_ids, start, end],
    )
    return {(c, t): created for c, t, created in rows}


def engine_rate(start: datetime, end: datetime) -> dict[str, float]:
    """What the engine did in the window, every run of the bench: runs written and runs ended a
    minute, and runs written before the window's end not ended by then (its backlog). Ended <
    written with a growing backlog: the engine does not keep up, and the ended rate is its
    ceiling on this machine (the floor any dependency hop sits on)."""
    from bench.jobs import sql

    minutes = (end - start).total_seconds() / 60
    ((written, ended, backlog),) = sql(
        "SELECT count(*) FILTER (WHERE created_at >= %(s)s AND created_at < %(e)s), "
        "count(*) FILTER (WHERE finished_at >= %(s)s AND finished_at < %(e)s), "
        "count(*) FILTER (WHERE created_at < %(e)s AND (finished_at IS NULL OR finished_at >= %(e)s)) "
        "FROM scheduler_run WHERE created_at < %(e)s + interval '10 minutes'",
        {"s": start, "e": end},
    )
    return {"written": written / minutes, "ended": ended / minutes, "backlog": int(backlog)}


def measure(made: dict[str, list[int]], start: datetime, end: datetime, *, cap: float) -> dict[str, Any]:
    """Wait for the window's chains to finish (or `cap` seconds), then the figures."""
    from bench.common import wait_until
    from bench.jobs import sql

    minutes = int((end - start).total_seconds() // 60)
    expected = len(made["a"]) * minutes
    engine = engine_rate(start, end)

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
    gates = _gates(made["b"] + made["c"], start, end)
    # The end of each minute's burst: its last root run (A or independent) written. A hop whose
    # parent ended before it ended while the dispatchers were still firing that minute.
    burst_end: dict[datetime, datetime] = {}
    for group in (ind, a):
        for (_, t), runs in group.items():
            burst_end[t] = max(burst_end.get(t, runs[0][0]), runs[0][0])
    child_of = dict(zip(made["a"], made["b"], strict=True)) | dict(zip(made["b"], made["c"], strict=True))
    written: list[float] = []
    settle: list[float] = []
    fire: list[float] = []
    in_burst: list[float] = []
    after_burst: list[float] = []
    missing = 0
    for parents in (a, b):
        for (job_id, t), runs in parents.items():
            child = (child_of[job_id], t)
            theirs = b.get(child) if job_id in made["a"] else c.get(child)
            if not theirs or runs[0][1] is None:
                missing += 1
                continue
            ended, child_written = runs[0][1], theirs[0][0]
            hop = (child_written - ended).total_seconds()
            written.append(hop)
            (in_burst if ended < burst_end[t] else after_burst).append(hop)
            if child in gates:
                settle.append((gates[child] - ended).total_seconds())
                fire.append((child_written - gates[child]).total_seconds())
    doubled = sum(1 for group in (ind, a, b, c) for v in group.values() if len(v) > 1)

    def dist(values: list[float]) -> dict[str, float]:
        return {**summary(values), "max": max(values)} if values else {}

    return {
        "independent_lag": summary(lag) if lag else {},
        "independent_runs": len(lag),
        "dependent_written": dist(written),
        "dependent_runs": len(written),
        "hop_settle": dist(settle),
        "hop_fire": dist(fire),
        "hop_in_burst": dist(in_burst),
        "hop_after_burst": dist(after_burst),
        "burst_seconds": max(((e - t).total_seconds() for t, e in burst_end.items()), default=0.0),
        "engine": engine,
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

    stack = start_ours(env, logs, tag, dispatchers=2, agents=args.agents)
    try:
        now = db_now()
        # The window: whole minutes from the first boundary at least two minutes away (a
        # restarted stack's first tick fires what came due while it was down, and the runs of
        # that burst end meanwhile: not in the window).
        start = (now + timedelta(seconds=125)).replace(second=0, microsecond=0)
        end = start + timedelta(minutes=args.minutes)
        print(f"  {tag}: window {start:%H:%M:%S} - {end:%H:%M:%S} UTC", flush=True)
        sleep_until(time.time() + (start - db_now()).total_seconds())
        load = os.getloadavg()[0]
        sleep_until(time.time() + (end - db_now()).total_seconds() + 5)
        load = max(load, os.getloadavg()[0])
        print(
            f"  {tag}: load average (1 min) {load:.2f} at the window's start / end (the larger)", flush=True
        )
        return {**measure(made, start, end, cap=args.cap), "load": load}
    finally:
        stack.stop()


def between_windows(env: dict[str, str]) -> None:
    """Each window starts with an empty engine: the runs, steps and history of the one before
    (its backlog, when the engine did not keep up) and its broker messages dropped. Its figures
    were read already."""
    from bench.common import truncate_engine
    from bench.jobs import purge_redis

    truncate_engine()
    purge_redis(env["SAS_REDIS_PREFIX"])


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
    for key, what in (
        ("hop_settle", "  of which: parent ended -> its settle wrote the child's gate"),
        ("hop_fire", "  of which: gate written -> child's run written"),
        ("hop_in_burst", "  hops whose parent ended while the minute's burst was being fired"),
        ("hop_after_burst", "  hops whose parent ended after it"),
    ):
        d = w[key]
        if d:
            rows.append(
                (
                    f"{what} ({d['n']:,}) p50 / p99 / max",
                    f"{fmt_ms(d['p50'])} / {fmt_ms(d['p99'])} / {fmt_ms(d['max'])}",
                )
            )
    rows.append(
        ("the minute's burst fired in (last root run written), longest", f"{fmt_ms(w['burst_seconds'])}")
    )
    windows = ("without", "with", "floor") if "floor" in out else ("without", "with")
    for name in windows:
        e = out[name]["engine"]
        rows.append(
            (
                f"engine {name} chains: runs written / ended a minute, backlog at the end",
                f"{e['written']:,.0f} / {e['ended']:,.0f} / {e['backlog']:,} (load {out[name]['load']:.2f})",
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
    if "floor" in out:
        f = out["floor"]["engine"]
        rows.append(
            (
                "engine with chains : floor (same runs a minute, no dependency), runs ended a minute",
                f"{w['engine']['ended'] / f['ended']:.2f}" if f["ended"] else "-",
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
    parser.add_argument("--agents", type=int, default=1, help="no-op agent worker processes (8 threads each)")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=0,
        help="SAS_MAX_IN_FLIGHT, the engine's cap per operation (0: as set)",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="a third window: the chains off, 3 x --chains more independent jobs (the same runs a minute)",
    )
    parser.add_argument("--quick", action="store_true", help="100 chains, 100 independent, 1 minute")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.chains, args.independent, args.minutes = 100, 100, 1
    os.environ["SAS_WORKFLOW_MODULES"] = "bench.jobs_tasks"
    if args.in_flight:
        os.environ["SAS_MAX_IN_FLIGHT"] = str(args.in_flight)
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
    between_windows(env)
    t0 = time.time()
    chains = make_jobs(owner_ids, chains=args.chains, independent=0)
    made = {**chains, "independent": made["independent"]}
    print(f"  {args.chains:,} chains ({3 * args.chains:,} jobs) made in {time.time() - t0:.1f} s", flush=True)
    out["with"] = one_run(env, logs, "with", args, made)
    if args.json:  # what was measured so far, should the floor window fail
        args.json.write_text(json.dumps(out, indent=2, default=str))
    if args.floor:
        # The same run rate with no dependency: the chains' jobs off, as many independent
        # every-minute jobs more as the chains ran runs a minute (A, B and C each once).
        from bench.jobs import sql

        chain_jobs = made["a"] + made["b"] + made["c"]
        sql("DELETE FROM scheduler_scheduledjob WHERE job_id = ANY(%s)", [chain_jobs])
        sql("UPDATE scheduler_job SET enabled = false WHERE id = ANY(%s)", [chain_jobs])
        between_windows(env)
        extra = make_jobs(owner_ids, chains=0, independent=3 * args.chains, prefix="floor")["independent"]
        floor = {"a": [], "b": [], "c": [], "independent": made["independent"] + extra}
        out["floor"] = one_run(env, logs, "floor", args, floor)
    report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()

"""What the engine's periodic work costs when nothing else happens (issue 27): CPU per second,
by process, of an idle stack - and of the same stack with parts of its periodic work turned off.

    SAS_BENCH_DB=<name> python bench/idle_cost.py [--seconds 60] [--rounds 2]

The stack is the bench layout (bench/compare.py's engine): one worker consuming every queue
(prefork, one pool process) and beat. Three variants, each started afresh, warmed up for 10 s,
then measured over --seconds, alternating over --rounds:
  all         as shipped: beat sends the supervisor sweep (1 s), the jobs dispatcher (1 s), the
              scheduler's safety tick (2 s) and the alert evaluation (5 s); the worker's consumer
              heartbeat (liveness/heartbeat.py) and, in the worker consuming `supervisor`, the
              alerting watchdog thread (alerting/watchdog.py);
  no-alerts   SAS_ALERTS_ENABLED=0: beat's evaluation is a no-op and the watchdog idles;
  no-beat     the worker alone: heartbeat and watchdog only (no sweep, dispatcher, tick or
              evaluation is sent).
Each difference is that part's share: all - no-alerts is the operations wing's evaluation,
no-alerts - no-beat the engine's own periodic tasks (sweep, dispatcher, tick), no-beat what
is left (heartbeat, watchdog, Celery's own timers). CPU is read from /proc (psutil) for the
worker's processes, beat, and the PostgreSQL backends connected to the bench database (other
databases' backends - a test session beside it - are not counted). Redis is shared with
whatever else runs and is left out.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BENCH_DB, bench_environment, log_dir, truncate_engine
from bench.cpu_by_process import snapshot
from bench.engine import ENGINE_QUEUES

VARIANTS = ("all", "no-alerts", "no-beat")


def _group(pid: int, info: tuple[str, str, float, int], ours: dict[int, str]) -> str:
    """The group of a process: the bench database's backends, or one of `ours` (pid -> group) or
    a child of one (the worker's pool); "" for everything else on the machine."""
    name, cmd, _, ppid = info
    if name.startswith("postgres") and f" {BENCH_DB} " in f" {cmd} ":
        return "PostgreSQL (bench database's backends)"
    if pid in ours:
        return ours[pid]
    if ppid in ours:
        return f"{ours[ppid]}'s children (the pool)"
    return ""


def measure(variant: str, seconds: float, env: dict[str, str], logs: Path) -> dict[str, float]:
    """ms of CPU per second of wall time, by process group, of one variant."""
    from sastools.harness import celery_beat, celery_worker

    worker_name = f"idle-cost-{variant}"
    worker_env = {**env, "SAS_ALERTS_ENABLED": "0"} if variant != "all" else env
    worker = celery_worker(
        name=worker_name, queues=ENGINE_QUEUES, log_dir=logs, env=worker_env, concurrency=1
    ).start(ready_marker=" ready.")
    beat = (
        None
        if variant == "no-beat"
        else celery_beat(log_dir=logs, env=worker_env).start(ready_marker="beat: Starting")
    )
    try:
        time.sleep(10)  # warm-up: pools, connections, the first ticks
        ours = {worker.pid: "worker main process"}
        if beat is not None:
            ours[beat.pid] = "beat"
        before, t0 = snapshot(), time.perf_counter()
        time.sleep(seconds)
        after, elapsed = snapshot(), time.perf_counter() - t0
    finally:
        if beat is not None:
            beat.stop()
        worker.stop()
    spent: dict[str, float] = collections.defaultdict(float)
    for pid, info in after.items():
        key = _group(pid, info, ours)
        if key:
            spent[key] += max(0.0, info[2] - before.get(pid, ("", "", info[2], 0))[2])
    return {key: value * 1000 / elapsed for key, value in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if args.seconds <= 0 or args.rounds < 1:
        parser.error("--seconds must be positive and --rounds at least 1")

    env = bench_environment()
    logs = log_dir()
    truncate_engine()
    figures: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for n in range(args.rounds):
        order = VARIANTS[n % 3 :] + VARIANTS[: n % 3]
        for variant in order:
            figures[variant].append(measure(variant, args.seconds, env, logs))
            total = sum(figures[variant][-1].values())
            print(f"round {n + 1}, {variant}: {total:.1f} ms of CPU per second", flush=True)

    groups = sorted({g for rounds in figures.values() for r in rounds for g in r})

    def med(variant: str, group: str | None) -> float:
        values = [sum(r.values()) if group is None else r.get(group, 0.0) for r in figures[variant]]
        return statistics.median(values)

    print(
        f"\nms of CPU per second, idle, median of {args.rounds} round(s) of {args.seconds:.0f} s"
        f" (logs in {logs})"
    )
    print("| process | all | no-alerts | no-beat |")
    print("|---|---|---|---|")
    for g in [*groups, None]:
        label = "**all of them**" if g is None else g
        print(f"| {label} | " + " | ".join(f"{med(v, g):.1f}" for v in VARIANTS) + " |")
    all_, no_alerts, no_beat = (med(v, None) for v in VARIANTS)
    print("\nshares of the idle stack's CPU (ms per second; of one core, 1000 = 100%):")
    print(f"- alert evaluation (beat's tick every 5 s + the watchdog's checks): {all_ - no_alerts:.1f}")
    print(f"- the engine's periodic tasks (sweep, dispatcher, safety tick):     {no_alerts - no_beat:.1f}")
    print(f"- what is left (consumer heartbeat, watchdog timer, Celery timers):  {no_beat:.1f}")


if __name__ == "__main__":
    main()

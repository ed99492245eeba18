"""Every benchmark of issue 2, one after another, on this machine, in one run.

    make bench                      # or: python bench/run_all.py [--quick]

1. bench/engine.py: bare Celery no-op throughput and round trip vs engine orders/s, steps/s and
   submit -> Completed p50/p99, with 1 and 2 worker processes, replies inline (the default);
2. bench/engine.py --reply-mode queue: the same with replies through the scheduler queue - the
   measurement behind the inline default;
3. bench/sweep.py: the supervisor's sweep at 1,000,000 step rows, idle and with 1% expired;
4. bench/kill_rerun.py: how soon a step whose agent was SIGKILLed runs again;
5. bench/compare.py (issue 6): the engine against a standalone Celery no-op, a plain Celery chain
   and a Procrastinate chain, orders/s and p50/p99, with 1 and 2 worker processes;
6. bench/saturation.py (issue 6): drain a backlog of --saturation-orders orders submitted up
   front (10,000 here; the script's own default is 50,000), with 1 and 2 worker processes.

Each script prints its own table (figures and ratios against the targets); this one runs them
in order so they share the machine's state, and stops at the first that fails. `--quick` runs
small sizes, to check the scripts work (its figures are not the ones to quote).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: check the scripts run")
    parser.add_argument(
        "--saturation-orders", type=int, default=10_000, help="backlog for bench/saturation.py"
    )
    parser.add_argument(
        "--only", nargs="+", metavar="SCRIPT", help="run only these scripts (e.g. compare.py)"
    )
    args = parser.parse_args()
    if args.quick:
        engine = ["--orders", "30", "--noop-tasks", "300", "--latency-samples", "10"]
        plans = [
            ("engine.py", [*engine]),
            ("engine.py", [*engine, "--reply-mode", "queue", "--concurrency", "1"]),
            ("sweep.py", ["--rows", "100000"]),
            ("kill_rerun.py", ["--trials", "1"]),
            ("compare.py", ["--orders", "30", "--noop-tasks", "300", "--latency-samples", "10"]),
            ("saturation.py", ["--orders", "300"]),
        ]
    else:
        plans = [
            ("engine.py", []),
            ("engine.py", ["--reply-mode", "queue"]),
            ("sweep.py", []),
            ("kill_rerun.py", []),
            ("compare.py", []),
            ("saturation.py", ["--orders", str(args.saturation_orders)]),
        ]
    if args.only:
        unknown = set(args.only) - {script for script, _ in plans}
        if unknown:
            parser.error(f"unknown script(s): {', '.join(sorted(unknown))}")
        plans = [plan for plan in plans if plan[0] in args.only]
    for script, script_args in plans:
        print(f"\n=== bench/{script} {' '.join(script_args)}", flush=True)
        started = time.monotonic()
        result = subprocess.run([sys.executable, str(BENCH / script), *script_args], check=False)
        print(f"=== bench/{script}: {time.monotonic() - started:.0f} s, exit {result.returncode}", flush=True)
        if result.returncode != 0:
            sys.exit(result.returncode)


if __name__ == "__main__":
    main()

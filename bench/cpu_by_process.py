"""Who spends the CPU of an engine burst: machine CPU per order, by process.

    SAS_BENCH_DB=<name> python bench/cpu_by_process.py [--orders 1000] [--concurrency 1] [--py-spy]

Starts the simulator, one worker consuming every queue (`--concurrency` pool processes) and
beat, as `bench/compare.py` does for the engine; submits `--orders` orders with `order_submit`
from this process, waits until every run is finished, and prints each process group's CPU time
(user + system, `/proc/<pid>/stat` through psutil) per order: the worker's pool processes and
its main process apart, this submitting process, PostgreSQL's backends, Redis, the simulator
and beat. With `--py-spy`, py-spy records every worker process for 12 s after the submits
(raw format, idle samples included; `SAS_PYSPY_FLAGS=--gil` samples only while a process
holds the GIL, about its CPU instead) into the log directory - `py-spy` must be on PATH or in
the venv (`pip install py-spy`; not a project dependency).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from bench.common import BURST_POLL_INTERVAL, bench_environment, log_dir, truncate_engine
from bench.engine import ENGINE_QUEUES, ORDER

Snapshot = dict[int, tuple[str, str, float, int]]


def snapshot() -> Snapshot:
    """pid -> (name, command line, CPU seconds, parent pid) of every process we may read."""
    out: Snapshot = {}
    for proc in psutil.process_iter(["pid", "name", "cmdline", "ppid"]):
        try:
            times = proc.cpu_times()
            cmd = " ".join(proc.info["cmdline"] or [])
            out[proc.pid] = (proc.info["name"] or "", cmd, times.user + times.system, proc.info["ppid"])
        except (psutil.Error, OSError):
            continue
    return out


def group(pid: int, info: tuple[str, str, float, int], everything: Snapshot, worker_name: str) -> str:
    name, cmd, _, ppid = info
    if pid == os.getpid():
        return "this process (order_submit)"
    if name.startswith("postgres"):
        return "PostgreSQL"
    if "redis" in name:
        return "Redis"
    if worker_name in cmd:
        parent_cmd = everything.get(ppid, ("", "", 0.0, 0))[1]
        return "worker pool processes" if worker_name in parent_cmd else "worker main process"
    if " beat" in cmd:
        return "beat"
    if "simulator" in cmd:
        return "simulator"
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=1, help="worker pool processes")
    parser.add_argument("--py-spy", action="store_true", help="also record the worker with py-spy")
    args = parser.parse_args()

    env = bench_environment()
    from django.contrib.auth import get_user_model

    from orders.services import order_submit
    from sastools.harness import celery_beat, celery_worker, simulator_process
    from scheduler.models import Run

    logs = log_dir()
    worker_name = f"cpu-by-process-{os.getpid()}"
    sim = simulator_process(url=env["SIMULATOR_URL"], log_dir=logs, env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    truncate_engine()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    worker = celery_worker(
        name=worker_name, queues=ENGINE_QUEUES, log_dir=logs, env=env, concurrency=args.concurrency
    ).start(ready_marker=" ready.")
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker="beat: Starting")
    try:
        for _ in range(20):  # warm-up: pools, connections, caches
            order_submit(owner_id=user.id, data=ORDER)
        time.sleep(3)
        truncate_engine()
        before = snapshot()
        started = time.perf_counter()
        for _ in range(args.orders):
            order_submit(owner_id=user.id, data=ORDER)
        submitted = time.perf_counter() - started
        if args.py_spy:
            spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
            pids = sorted(pid for pid, info in snapshot().items() if worker_name in info[1])
            spy_flags = os.environ.get("SAS_PYSPY_FLAGS", "--idle").split()
            recorders = [
                subprocess.Popen(
                    [spy, "record", *spy_flags, "-r", "200", "-d", "12", "-f", "raw", "-o",
                     str(logs / f"py-spy-{pid}.txt"), "-p", str(pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for pid in pids
            ]  # fmt: skip
            for recorder in recorders:
                recorder.wait()
        while Run.objects.filter(state__in=Run.TERMINAL_STATES).count() < args.orders:
            time.sleep(BURST_POLL_INTERVAL)
        elapsed = time.perf_counter() - started
        after = snapshot()
        not_completed = Run.objects.exclude(state=Run.State.COMPLETED).count()
    finally:
        beat.stop()
        worker.stop()
        sim.stop()
        truncate_engine()

    spent: dict[str, float] = collections.defaultdict(float)
    for pid, info in after.items():
        delta = info[2] - before.get(pid, ("", "", 0.0, 0))[2]
        if delta > 0:
            spent[group(pid, info, after, worker_name)] += delta
    print(
        f"{args.orders} orders, {args.concurrency} pool process(es): {args.orders / elapsed:.1f} orders/s "
        f"(submits {submitted:.1f} s, all done {elapsed:.1f} s; not completed: {not_completed})"
    )
    print("| process | CPU ms per order | share of one core |")
    print("|---|---|---|")
    for name, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"| {name} | {seconds * 1000 / args.orders:.2f} | {seconds / elapsed * 100:.0f}% |")
    print(f"| all | {sum(spent.values()) * 1000 / args.orders:.2f} | |")
    if args.py_spy:
        print(f"py-spy profiles: {logs}/py-spy-*.txt")


if __name__ == "__main__":
    main()

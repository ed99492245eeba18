"""Issue 6's comparison: the engine against three baselines, in one run, on this machine.

    python bench/compare.py [--orders 300] [--latency-samples 100] [--noop-tasks 3000] [--concurrency 1 2]
                            [--rounds 1]

For each number of worker processes (1 and 2 by default), each system gets its own workers and
the same simulator (zero latency):
  (a) a standalone Celery app (no Django, no task events; bench/baselines/bare_celery.py) with our
      workers' settings: no-op tasks/s over a burst of --noop-tasks;
  (b) the same 3-step order as a plain Celery chain in that app, each task making the agents'
      HTTP call to the simulator: orders/s over a burst of --orders, and p50/p99 latency;
  (c) the same three calls as three chained Procrastinate jobs (bench/baselines/
      procrastinate_{app,bench}.py, in the bench-only venv .bench-venv/, created on demand from
      bench/requirements-baselines.txt) on the same PostgreSQL, a database of its own: the same;
  engine: orders through `orders.services.order_submit` with one worker consuming every queue and
      beat running, as in bench/engine.py: the same.
With --floor (issue 27), two more in the same rounds:
  (f) the durable floor (bench/baselines/bare_celery.py `durable`): chain (b) where each task
      also commits its step's result to PostgreSQL (one INSERT, one durable COMMIT) before the
      next is sent - the least work a state store that keeps each step's outcome makes the
      hardware do. "engine p50 : floor p50" is what is left to the engine's own code.
  engine-durable: the engine with `sas.durable_steps = on` - every step's success waits for
      its WAL flush, as before record 42 - "engine-durable p50 : engine p50" is what that saves;
  engine-quiet: the engine as above without its periodic work (no beat: no sweep, dispatcher,
      safety tick or alert evaluation; SAS_ALERTS_ENABLED=0: no watchdog) - "engine p50 :
      engine-quiet p50" is the periodic work's share of the latency.

Latency is taken the same way for every system, over --latency-samples orders one at a time: the
clock starts when the submitting call returns and stops when a poll (every 2 ms) reads the final
state - the engine's Run row Completed (PostgreSQL), the chain's last task's Redis key, the last
Procrastinate job's row 'succeeded'. A burst is timed from just before its first submit until a
poll (every 10 ms) sees its last order done. The targets of issue 6 are printed met / missed.

`--rounds N` measures every system N times per number of processes, the order of the systems
rotated each round, and takes each ratio within a round (its two systems measured minutes apart,
not tens of minutes); the table shows each figure's median over the rounds and each ratio's
median with its range, and the verdict is the median's. On a shared machine one burst can swing
by a third (bench/README.md, "Runs of 2026-11-23, third machine"): a single round's ratio says
little. Each system's line also shows the CPU the hypervisor stole from this machine while it
ran (/proc/stat), the noise made visible.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BENCH_DB,
    BURST_POLL_INTERVAL,
    POLL_INTERVAL,
    REPO,
    baseline_env,
    bench_environment,
    ensure_bench_venv,
    fmt_ms,
    log_dir,
    summary,
    truncate_engine,
)
from bench.cpu import busy_cpu_seconds, steal_seconds
from bench.engine import ENGINE_QUEUES, ORDER

PROCRASTINATE_DB = f"{BENCH_DB}_procrastinate"


def run_baseline(python: str, module: str, args: list[str], env: dict[str, str]) -> dict[str, float]:
    result = subprocess.run(
        [python, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{module} {' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def engine(
    env: dict[str, str],
    concurrency: int,
    orders: int,
    samples: int,
    logs: Path,
    threads: int = 0,
    periodic: bool = True,
    durable_steps: bool = False,
) -> dict[str, float]:
    from django.contrib.auth import get_user_model
    from django.db import connection

    from orders.services import order_submit
    from sastools.harness import celery_beat, celery_worker
    from scheduler.models import Run

    truncate_engine()
    # engine-durable: every success waits for its WAL flush (docs/decisions.md, record 42); new
    # connections - the workers' - take the database's setting.
    with connection.cursor() as admin:
        setting = "SET sas.durable_steps = on" if durable_steps else "RESET sas.durable_steps"
        admin.execute(f"ALTER DATABASE {BENCH_DB} {setting}")
    user, _ = get_user_model().objects.get_or_create(username="bench")
    # Prefork with `concurrency` processes, or (threads) `concurrency` workers of -P threads -c
    # `threads` each - the layout of the Procfile's agent workers.
    workers = [
        celery_worker(
            name=f"compare-engine{'' if periodic else '-quiet'}-{concurrency}-{i}",
            queues=ENGINE_QUEUES,
            log_dir=logs,
            env=env if periodic else {**env, "SAS_ALERTS_ENABLED": "0"},
            concurrency=threads or concurrency,
            pool="threads" if threads else "prefork",
        ).start(ready_marker=" ready.")
        for i in range(concurrency if threads else 1)
    ]
    # Beat runs as in production: the supervisor sweep and the scheduler tick (not for the
    # engine-quiet variant, which measures the engine without its periodic work).
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker="beat: Starting") if periodic else None

    # The polls are the harness, not the engine: one plain statement each, as cheap for the
    # client as the chain's Redis GET (0.07 ms of client CPU against 0.7 ms through the ORM,
    # measured here; every 2 ms, the ORM's would take a third of a core from the workers).
    def poll(sql: str, params: tuple[Any, ...] = ()) -> Any:
        cursor.execute(sql, params)
        row = cursor.fetchone()
        return None if row is None else row[0]

    terminal = tuple(str(s) for s in Run.TERMINAL_STATES)
    one_state = "SELECT state FROM scheduler_run WHERE id = %s"
    finished = "SELECT count(*) FROM scheduler_run WHERE state = ANY(%s)"

    def latencies(n: int) -> list[float]:
        values = []
        for _ in range(n):
            order = order_submit(owner_id=user.id, data=ORDER)
            t0 = time.perf_counter()
            deadline = time.monotonic() + 30
            while True:
                state = poll(one_state, (order.run_id,))
                if state == Run.State.COMPLETED:
                    break
                if state in Run.TERMINAL_STATES or time.monotonic() > deadline:
                    raise RuntimeError(f"bench order {order.pk} is {state}")
                time.sleep(POLL_INTERVAL)
            values.append(time.perf_counter() - t0)
        return values

    cursor = connection.cursor()
    try:
        latencies(10)  # warm-up: pools, connections and caches hot
        truncate_engine()
        started = time.perf_counter()
        cpu0 = busy_cpu_seconds()
        for _ in range(orders):
            order_submit(owner_id=user.id, data=ORDER)
        last, last_change = -1, time.monotonic()
        while (done := poll(finished, (list(terminal),))) < orders:
            if done != last:
                last, last_change = done, time.monotonic()
            elif time.monotonic() - last_change > 60:
                raise RuntimeError(f"engine burst stalled at {done}/{orders}")
            time.sleep(BURST_POLL_INTERVAL)
        elapsed = time.perf_counter() - started
        cpu_ms = (busy_cpu_seconds() - cpu0) * 1000 / orders
        bad = Run.objects.exclude(state=Run.State.COMPLETED).count()
        if bad:
            raise RuntimeError(f"{bad} bench runs did not complete")
        truncate_engine()
        lat = summary(latencies(samples))
        return {
            "per_s": orders / elapsed,
            "p50": lat["p50"],
            "p99": lat["p99"],
            "n": orders,
            "cpu_ms": cpu_ms,
        }
    finally:
        cursor.close()
        if beat is not None:
            beat.stop()
        for worker in workers:
            worker.stop()
        truncate_engine()


def verdict(value: float, target: float, *, at_least: bool) -> str:
    met = value >= target if at_least else value <= target
    return "met" if met else "MISSED"


Round = dict[str, dict[str, float]]


def _median(rounds: list[Round], system: str, key: str) -> float:
    return statistics.median(r.get(system, {}).get(key, float("nan")) for r in rounds)


def report(results: dict[str, list[Round]]) -> None:
    """One column per number of processes: each figure's median over the rounds; each ratio
    taken within every round, its median (the verdict) and, over several rounds, its range."""
    cols = list(results)
    several = any(len(rounds) > 1 for rounds in results.values())
    head = (
        "| | "
        + " | ".join(f"{c[1:]} worker process{'es' if c != 'c1' else ''}" for c in cols)
        + " | target |"
    )
    lines = [head, "|---" * (len(cols) + 2) + "|"]

    def row(label: str, cell: Any, target: str = "") -> None:
        lines.append(f"| {label} | " + " | ".join(cell(results[c]) for c in cols) + f" | {target} |")

    def ratio(rounds: list[Round], a: str, b: str, key: str, target: float | None, at_least: bool) -> str:
        if any(a not in r or b not in r for r in rounds):
            return "- (not measured)"
        values = [r[a][key] / r[b][key] for r in rounds]
        value = statistics.median(values)
        text = f"**{value:.2f}**"
        if target is not None:
            text += f" {verdict(value, target, at_least=at_least)}"
        if len(values) > 1:
            text += f" ({min(values):.2f}-{max(values):.2f})"
        return text

    def figure(system: str, key: str, fmt: str) -> Any:
        return lambda rounds: format(_median(rounds, system, key), fmt)

    def latency(system: str) -> Any:
        def cell(rounds: list[Round]) -> str:
            return f"{fmt_ms(_median(rounds, system, 'p50'))} / {fmt_ms(_median(rounds, system, 'p99'))}"

        return cell

    if several:
        row("rounds", lambda rounds: str(len(rounds)))
    row("(a) bare Celery no-op tasks/s", figure("noop", "per_s", ".0f"))
    row("(b) plain Celery chain orders/s", figure("chain", "per_s", ".1f"))
    row("(b) chain p50 / p99", latency("chain"))
    row("(c) Procrastinate orders/s", figure("procrastinate", "per_s", ".1f"))
    row("(c) Procrastinate p50 / p99", latency("procrastinate"))
    floor = "floor" in next(iter(results.values()))[0]
    if floor:
        row("(f) durable floor orders/s", figure("floor", "per_s", ".1f"))
        row("(f) durable floor p50 / p99", latency("floor"))
        row("engine-durable (a flush per step) p50 / p99", latency("engine_durable"))
        row("engine-quiet (no periodic work) p50 / p99", latency("engine_quiet"))
    row("engine orders/s", figure("engine", "per_s", ".1f"))
    row("engine steps/s", lambda rounds: f"{3 * _median(rounds, 'engine', 'per_s'):.0f}")
    row("engine p50 / p99", latency("engine"))
    row(
        "machine CPU per order in the burst: chain / Procrastinate / engine",
        lambda rounds: " / ".join(
            f"{_median(rounds, k, 'cpu_ms'):.1f} ms" for k in ("chain", "procrastinate", "engine")
        ),
    )
    row(
        "CPU stolen by the hypervisor, ms per s: chain / Procrastinate / engine",
        lambda rounds: " / ".join(
            f"{_median(rounds, k, 'steal_ms_per_s'):.0f}" for k in ("chain", "procrastinate", "engine")
        ),
    )
    row("engine orders/s : chain's", lambda r: ratio(r, "engine", "chain", "per_s", 0.75, True), ">= 0.75")
    row(
        "engine orders/s : Procrastinate's",
        lambda r: ratio(r, "engine", "procrastinate", "per_s", 1.0, True),
        ">= 1",
    )
    row("engine p50 : chain p50", lambda r: ratio(r, "engine", "chain", "p50", 2.0, False), "<= 2")
    row("engine p99 : chain p99", lambda r: ratio(r, "engine", "chain", "p99", 3.0, False), "<= 3")
    if floor:
        row(
            "(f) floor p50 : chain p50 (the hardware's share)",
            lambda r: ratio(r, "floor", "chain", "p50", None, False),
        )
        row(
            "engine p50 : floor p50 (the engine's own share)",
            lambda r: ratio(r, "engine", "floor", "p50", None, False),
        )
        row(
            "engine-durable p50 : engine p50 (what record 42 saves)",
            lambda r: ratio(r, "engine_durable", "engine", "p50", None, False),
        )
        row(
            "engine-durable p50 : chain p50",
            lambda r: ratio(r, "engine_durable", "chain", "p50", None, False),
        )
        row(
            "engine p50 : engine-quiet p50 (periodic work's share)",
            lambda r: ratio(r, "engine", "engine_quiet", "p50", None, False),
        )
    row(
        "engine steps/s : (a) no-op tasks/s",
        lambda rounds: ratio(
            [{**r, "engine3": {"per_s": 3 * r["engine"]["per_s"]}} for r in rounds],
            "engine3",
            "noop",
            "per_s",
            None,
            True,
        ),
        "reported",
    )
    print("\n" + "\n".join(lines), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=300, help="orders in each burst")
    parser.add_argument("--noop-tasks", type=int, default=3000, help="no-op tasks in baseline (a)'s burst")
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2], help="worker processes")
    parser.add_argument(
        "--procrastinate-layout",
        choices=["concurrency", "processes"],
        default="concurrency",
        help="N as one Procrastinate worker with --concurrency N (default) or N workers of concurrency 1",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="0: prefork workers; K: N workers of -P threads -c K, for the chain and the engine alike "
        "(the Procfile's agent layout); Procrastinate is async either way",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="measure every system this many times (medians reported)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also (f) the durable floor and the engine without its periodic work (issue 27)",
    )
    parser.add_argument(
        "--skip",
        nargs="*",
        default=[],
        choices=["noop", "procrastinate"],
        help="leave these baselines out (the floor comparison needs only the chain)",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")

    env = bench_environment()
    from sastools.harness import simulator_process

    bench_python = str(ensure_bench_venv())
    logs = log_dir()
    head, _, _ = env["DATABASE_URL"].rpartition("/")
    base_env = {
        **baseline_env(env),
        "BARE_PREFIX": f"benchbare{os.getpid()}:",
        "BENCH_LOG_DIR": str(logs),
        "PROCRASTINATE_DSN": f"{head.replace('postgres://', 'postgresql://', 1)}/{PROCRASTINATE_DB}",
    }
    sim = simulator_process(url=env["SIMULATOR_URL"], log_dir=logs, env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    samples = ["--samples", str(args.latency_samples)]
    results: dict[str, list[Round]] = {}
    module = "bench.baselines.bare_celery"

    def noop(c: int) -> dict[str, float]:
        conc = ["--concurrency", str(c), "--threads", str(args.threads)]
        return run_baseline(
            sys.executable, module, ["noop", *conc, "--tasks", str(args.noop_tasks), *samples], base_env
        )

    def chain(c: int) -> dict[str, float]:
        conc = ["--concurrency", str(c), "--threads", str(args.threads)]
        return run_baseline(
            sys.executable, module, ["chain", *conc, "--orders", str(args.orders), *samples], base_env
        )

    def procrastinate(c: int) -> dict[str, float]:
        layout = (
            ["--processes", "1", "--concurrency", str(c)]
            if args.procrastinate_layout == "concurrency"
            else ["--processes", str(c), "--concurrency", "1"]
        )
        return run_baseline(
            bench_python,
            "bench.baselines.procrastinate_bench",
            [*layout, "--orders", str(args.orders), *samples],
            base_env,
        )

    def floor(c: int) -> dict[str, float]:
        conc = ["--concurrency", str(c), "--threads", str(args.threads)]
        return run_baseline(
            sys.executable,
            module,
            ["durable", *conc, "--orders", str(args.orders), *samples],
            {**base_env, "BARE_DATABASE_URL": env["DATABASE_URL"].replace("postgres://", "postgresql://", 1)},
        )

    def the_engine(c: int) -> dict[str, float]:
        return engine(env, c, args.orders, args.latency_samples, logs, threads=args.threads)

    def engine_durable(c: int) -> dict[str, float]:
        return engine(
            env, c, args.orders, args.latency_samples, logs, threads=args.threads, durable_steps=True
        )

    def engine_quiet(c: int) -> dict[str, float]:
        return engine(env, c, args.orders, args.latency_samples, logs, threads=args.threads, periodic=False)

    systems = {"noop": noop, "chain": chain, "procrastinate": procrastinate, "engine": the_engine}
    if args.floor:
        systems |= {"floor": floor, "engine_durable": engine_durable, "engine_quiet": engine_quiet}
    for name in args.skip:
        systems.pop(name)
    names = list(systems)
    try:
        for c in args.concurrency:
            results[f"c{c}"] = []
            for n in range(args.rounds):
                print(
                    f"\nworker processes: {c}, round {n + 1} of {args.rounds}  (logs in {logs})", flush=True
                )
                r: Round = {}
                # Rotated each round, so no system always runs first (or right after another).
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    steal0, t0 = steal_seconds(), time.perf_counter()
                    r[name] = systems[name](c)
                    r[name]["steal_ms_per_s"] = 1000 * (steal_seconds() - steal0) / (time.perf_counter() - t0)
                    unit = "tasks/s" if name == "noop" else "orders/s"
                    latency = "" if name == "noop" else f", p50 {fmt_ms(r[name]['p50'])}"
                    print(
                        f"  {name}: {r[name]['per_s']:.1f} {unit}{latency}"
                        f" (stolen {r[name]['steal_ms_per_s']:.0f} ms/s)",
                        flush=True,
                    )
                results[f"c{c}"].append(r)
    finally:
        sim.stop()
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

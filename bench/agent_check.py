"""What the agents' issue-26 check costs (issue 26, "Benchmark"): orders/s and p50 of the engine
with the check and without it, side by side in one run.

    python bench/agent_check.py [--orders 300] [--latency-samples 100] [--rounds 3] [--concurrency 2]
                                [--lookups 2000]

checked:   the project's workers as deployed: before any remote call every agent loads its
           request from the step (`scheduler.selectors.step_request_held`, one primary-key
           lookup).
unchecked: the same code with the check taken out (`-A bench.agent_unchecked`: the agent acts
           on its message, as before issue 26) - a bench-only app module, never a setting.
floor:     the least any state-store check must do (`-A bench.agent_floor`): one bare round trip
           to PostgreSQL (`SELECT 1`) where the check's lookup is, then the message is trusted.
           Only the state store knows that a queued step's run was cancelled meanwhile (issue
           26, item 6), so no check that keeps that promise costs less than this.

Each variant runs bench/engine.py's measure: one worker consuming every queue (prefork,
--concurrency processes) and beat; a warm-up; a burst of --orders 3-step orders (orders/s, first
submit to last Completed, database clock; and the CPU the worker and the bench database's
PostgreSQL backends spent on it, per order - the figure least moved by a shared machine's other
load); then --latency-samples orders one at a time (p50 / p99 submit -> Completed). Before
measuring, one forged request (a step that does not exist) is sent to each variant's worker: the
checked one must refuse it, the unchecked one must call the simulator - so the switch is known
to be what it says. Rounds alternate the order of the
variants, so the machine's drift falls on both; the table shows per-round figures and the median
of the ratios. Also printed: the lookup's own cost, timed in this process (--lookups calls).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SAS_BENCH_DB", "sasproject_bench_agentcheck")

from bench.common import bench_environment, fmt_ms, log_dir, print_table, summary, truncate_engine

VARIANTS = {"checked": "sasproject", "unchecked": "bench.agent_unchecked", "floor": "bench.agent_floor"}
REFUSED = "refused: no step of this operation is Processing"


def _switch_verified(name: str, worker: Any, sim: Any) -> None:
    """Send one forged refund (no such step); the checked worker must refuse it, the unchecked
    one must call the simulator with it."""
    from celery import current_app
    from django.utils import timezone

    from sastools.harness import wait_for

    calls = sim.stats()["total"]
    at = len(worker.log())
    current_app.send_task(
        "agents.payment.refund",
        kwargs={
            "step_id": 2**40,
            "lease": str(uuid.uuid4()),
            "complete_by": (timezone.now() + timedelta(seconds=30)).isoformat(),
            "idempotency_key": f"bench-forged-{uuid.uuid4()}",
            "payload": {"charge_key": "bench-none"},
        },
        ignore_result=True,
    )
    if name == "checked":
        wait_for(lambda: REFUSED in worker.log()[at:], timeout=60, what="the checked worker to refuse")
    else:
        wait_for(lambda: sim.stats()["total"] > calls, timeout=60, what="the unchecked worker to call")


def cpu_seconds(worker_pid: int) -> float:
    """CPU (user + system) so far of the worker (its main process and pool) and of the bench
    database's PostgreSQL backends: what an order costs where the check runs, less sensitive
    than wall-clock figures to the rest of a shared machine's load (bench/monitoring.py)."""
    import psutil

    total = 0.0
    try:
        worker = psutil.Process(worker_pid)
        for proc in [worker, *worker.children(recursive=True)]:
            times = proc.cpu_times()
            total += times.user + times.system
    except psutil.NoSuchProcess:
        pass
    database = os.environ["SAS_BENCH_DB"]
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if (proc.info["name"] or "").startswith("postgres") and database in cmdline:
                times = proc.cpu_times()
                total += times.user + times.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return total


def measure(
    env: dict[str, str], *, variant: str, concurrency: int, orders: int, samples: int, sim: Any
) -> dict:
    from django.contrib.auth import get_user_model

    from bench.engine import ENGINE_QUEUES, order_latencies, orders_burst, orders_warm
    from sastools.harness import celery_beat, celery_worker

    truncate_engine()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    logs = log_dir()
    worker = celery_worker(
        name=f"bench-{variant}",
        queues=ENGINE_QUEUES,
        log_dir=logs,
        env=env,
        concurrency=concurrency,
        app=VARIANTS[variant],
    ).start(ready_marker=" ready.")
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker="beat: Starting")
    try:
        _switch_verified(variant, worker, sim)
        orders_warm(user.id)
        assert worker.popen is not None
        cpu_before = cpu_seconds(worker.popen.pid)
        elapsed = orders_burst(user.id, orders)
        cpu = cpu_seconds(worker.popen.pid) - cpu_before
        truncate_engine()
        latencies = order_latencies(user.id, samples)
        lat = summary(latencies)
        return {"orders_per_s": orders / elapsed, "p50": lat["p50"], "p99": lat["p99"], "cpu": cpu / orders}
    finally:
        beat.stop()
        worker.stop()
        truncate_engine()


class _RolledBack(Exception):
    pass


def lookup_cost(lookups: int) -> float:
    """Seconds per `step_request_held` call on a Processing step, in this process (the query
    and its Python, as an agent pays them; the connection is warm). In a transaction rolled back
    at the end: the claim is never dispatched, nothing is left behind."""
    from django.contrib.auth import get_user_model
    from django.db import transaction

    from bench.engine import ORDER
    from orders.services import order_submit
    from scheduler import transitions
    from scheduler.models import Step
    from scheduler.selectors import step_request_held

    truncate_engine()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    cost = 0.0
    try:
        with transaction.atomic():
            order = order_submit(owner_id=user.id, data=ORDER)
            step = Step.objects.filter(run_id=order.run_id, process_state=Step.State.PROCESSING).first()
            if step is None:  # the submit did not claim (CLAIM_ON_SUBMIT off): claim it here
                (claim,) = transitions.step_claim_many(instance="bench", limit=1, run_id=order.run_id).claims
                step = Step.objects.get(pk=claim.step_id)
            held: dict[str, Any] = {"step_id": step.pk, "lease": str(step.lease), "operation": step.operation}
            if step_request_held(**held) is None:
                raise RuntimeError("the claimed step is not held under its own lease")
            started = time.perf_counter()
            for _ in range(lookups):
                step_request_held(**held)
            cost = (time.perf_counter() - started) / lookups
            raise _RolledBack
    except _RolledBack:
        pass
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()

    env = bench_environment()
    from sastools.harness import simulator_process
    from simulator.client import SimulatorControl

    sim_proc = simulator_process(url=env["SIMULATOR_URL"], log_dir=log_dir(), env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    sim = SimulatorControl(env["SIMULATOR_URL"])
    results: dict[str, list[dict]] = {name: [] for name in VARIANTS}
    try:
        per_lookup = lookup_cost(args.lookups)
        for index in range(args.rounds):
            order = list(VARIANTS) if index % 2 == 0 else list(reversed(VARIANTS))
            for name in order:
                figures = measure(
                    env,
                    variant=name,
                    concurrency=args.concurrency,
                    orders=args.orders,
                    samples=args.latency_samples,
                    sim=sim,
                )
                results[name].append(figures)
                print(
                    f"round {index + 1} {name:9s} {figures['orders_per_s']:6.1f} orders/s  "
                    f"p50 {fmt_ms(figures['p50'])}  p99 {fmt_ms(figures['p99'])}  "
                    f"CPU/order {fmt_ms(figures['cpu'])} (worker + PostgreSQL)",
                    flush=True,
                )
    finally:
        sim_proc.stop()

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    def ratios(key: str, base: str) -> list[float]:
        return [c[key] / b[key] for c, b in zip(results["checked"], results[base], strict=True)]

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"

    print(
        f"\n{args.rounds} rounds, {args.orders} orders + {args.latency_samples} one at a time, "
        f"1 worker x {args.concurrency} processes"
    )
    rows: list[tuple[str, str]] = []
    for name in VARIANTS:
        rows += [
            (f"{name} orders/s (median)", f"{med(name, 'orders_per_s'):.1f}"),
            (f"{name} p50 (median)", fmt_ms(med(name, "p50"))),
            (f"{name} CPU per order, worker + PostgreSQL (median)", fmt_ms(med(name, "cpu"))),
        ]
    verdicts = {}
    for base in ("unchecked", "floor"):
        throughput, p50, cpu = ratios("orders_per_s", base), ratios("p50", base), ratios("cpu", base)
        rows += [
            (f"checked : {base} orders/s, median [range]", spread(throughput)),
            (f"checked : {base} p50, median [range]", spread(p50)),
            (f"checked : {base} CPU/order, median [range]", spread(cpu)),
        ]
        verdicts[base] = statistics.median(throughput) >= 0.95 and statistics.median(p50) <= 1.05
    rows += [
        ("one lookup (step_request_held), in-process", f"{per_lookup * 1e6:.0f} us"),
        ("target: within 5% of unchecked", "met" if verdicts["unchecked"] else "missed"),
        ("within 5% of the floor (one round trip)", "yes" if verdicts["floor"] else "no"),
    ]
    print_table(rows)


if __name__ == "__main__":
    main()

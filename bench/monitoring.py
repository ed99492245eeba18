"""What monitoring costs the engine (issue 19): the engine benchmark (bench/engine.py's
`engine`) with the metrics and Flower's task events off and on, alternated in one run.

    python bench/monitoring.py [--orders 200] [--latency-samples 50] [--rounds 2] [--concurrency 2]

off:     SAS_METRICS=0 (no Redis writes per attempt), task events off, no Flower, no scrapes.
metrics: SAS_METRICS=1 and /metrics scraped every SCRAPE_EVERY seconds; no task events.
on:      SAS_METRICS=1, the workers' task events and the producer's task-sent events on
     (CELERY_WORKER_SEND_TASK_EVENTS / CELERY_TASK_SEND_SENT_EVENT = 1, what Flower turns on),
     a real Flower consuming them, and /metrics scraped every SCRAPE_EVERY seconds meanwhile.
Rounds rotate the variants so that the machine's drift falls on all. Printed: orders/s, the p50
submit->Completed and the CPU per order (worker, beat, Flower) of each, and the ratios to off
(target: cost <= 5%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SAS_BENCH_DB", "sasproject_bench_monitoring")

from bench.common import _free_port, bench_environment, fmt_ms, log_dir, print_table, wait_until


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


SCRAPE_EVERY = 2.0
TOKEN = "bench-metrics-token"


class CpuMeter(threading.Thread):
    """CPU time (user + system) of the engine's worker processes (the bench worker and its pool
    children, beat) and Flower, sampled every 0.2 s so that a child that exits counts up to its
    last sample. Less sensitive than wall-clock figures to the other load on a shared machine."""

    MARKERS = ("bench-engine-", "celery -A sasproject beat", "sasproject beat", "bench-flower", " flower ")

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.seen: dict[tuple[int, float], float] = {}

    def sample(self) -> None:
        import psutil

        for proc in psutil.process_iter(["pid", "cmdline", "create_time"]):
            try:
                cmdline = " ".join(proc.info["cmdline"] or [])
                if not any(marker in cmdline for marker in self.MARKERS) or proc.pid == os.getpid():
                    continue
                times = proc.cpu_times()
                self.seen[(proc.pid, proc.info["create_time"])] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.sample()

    def begin(self) -> None:
        """Count from now on: a process already running (Flower) counts only its CPU after this."""
        self.sample()
        self.base = dict(self.seen)
        self.start()

    def total(self) -> float:
        return sum(self.seen.values()) - sum(getattr(self, "base", {}).values())


class Scraper(threading.Thread):
    """Scrapes /metrics in this process (Django's test client, no web server) every few
    seconds while the engine runs, as Prometheus would (more often than its 15 s)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.times: list[float] = []

    def run(self) -> None:
        from django.db import connection
        from django.test import Client

        client = Client()
        while not self.stop.wait(SCRAPE_EVERY):
            started = time.perf_counter()
            response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
            self.times.append(time.perf_counter() - started)
            assert response.status_code == 200, response.status_code
        connection.close()


# name -> (the engine's metrics and scrapes, task events and a Flower)
VARIANTS = {"off": (False, False), "metrics": (True, False), "on": (True, True)}


def run_variant(base_env: dict[str, str], *, name: str, concurrency: int, orders: int, samples: int) -> dict:
    from django.conf import settings

    from bench.engine import engine
    from tests.harness import Proc

    metrics, on = VARIANTS[name]
    env = {
        **base_env,
        "SAS_METRICS": "1" if metrics else "0",
        "CELERY_WORKER_SEND_TASK_EVENTS": "1" if on else "0",
        "CELERY_TASK_SEND_SENT_EVENT": "1" if on else "0",
    }
    # This process submits the orders (the producer side of the task-sent events).
    settings.CELERY_TASK_SEND_SENT_EVENT = on
    from celery import current_app

    current_app.conf.task_send_sent_event = on
    settings.SAS_MONITORING = {**settings.SAS_MONITORING, "METRICS": metrics, "METRICS_TOKEN": TOKEN}
    flower = scraper = None
    if on:
        port = _free_port()
        flower = Proc(
            name="bench-flower",
            args=[
                sys.executable,
                "-m",
                "celery",
                "-A",
                "sasproject",
                "flower",
                "--address=127.0.0.1",
                f"--port={port}",
                "--basic_auth=bench:bench",
            ],
            log_path=log_dir() / "bench-flower.log",
            env=env,
        ).start(ready_marker=None)
        # The bench logs at WARNING: wait for Flower's port, not its INFO banner.
        wait_until(
            lambda: _answers(f"http://127.0.0.1:{port}/healthcheck"),
            timeout=60,
            interval=0.2,
            what="Flower to answer",
        )

    if metrics:
        scraper = Scraper()
        scraper.start()
    meter = CpuMeter()
    meter.begin()
    try:
        result = engine(env, concurrency, orders, samples)
    finally:
        meter.stop.set()
        meter.join(timeout=5)
        if scraper is not None:
            scraper.stop.set()
            scraper.join(timeout=30)
        if flower is not None:
            flower.stop()
    # Every order this call ran: 5 warm-up, the burst, the latency samples.
    result["cpu_ms_per_order"] = 1000 * meter.total() / (5 + orders + samples)
    if scraper is not None and scraper.times:
        result["scrapes"] = len(scraper.times)
        result["scrape_p50"] = statistics.median(scraper.times)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=200)
    parser.add_argument("--latency-samples", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    env = bench_environment()
    from tests.harness import simulator_process

    sim = simulator_process(url=env["SIMULATOR_URL"], log_dir=log_dir(), env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    names = list(args.variants)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    try:
        for round_ in range(args.rounds):
            # Each round starts with another variant, so that the machine's drift falls on all.
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for name in order:
                result = run_variant(
                    env,
                    name=name,
                    concurrency=args.concurrency,
                    orders=args.orders,
                    samples=args.latency_samples,
                )
                runs[name].append(result)
                print(
                    f"round {round_ + 1} {name}: {result['orders_per_s']:.1f} orders/s, "
                    f"p50 {fmt_ms(result['latency_p50'])}, "
                    f"worker CPU {result['cpu_ms_per_order']:.1f} ms/order",
                    flush=True,
                )
    finally:
        sim.stop()

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    print(f"\nworker processes: {args.concurrency}   rounds: {args.rounds}   orders: {args.orders}")
    rows = []
    ratios: dict[str, dict[str, float]] = {}
    for name in names:
        rows += [
            (f"{name}: orders/s (median of rounds)", f"{med(name, 'orders_per_s'):.1f}"),
            (f"{name}: submit->Completed p50", fmt_ms(med(name, "latency_p50"))),
            (f"{name}: CPU per order (worker, beat, Flower)", f"{med(name, 'cpu_ms_per_order'):.1f} ms"),
        ]
        if name != "off" and "off" in runs:
            ratios[name] = {
                "throughput": med(name, "orders_per_s") / med("off", "orders_per_s"),
                "p50": med(name, "latency_p50") / med("off", "latency_p50"),
                "cpu": med(name, "cpu_ms_per_order") / med("off", "cpu_ms_per_order"),
            }
            rows += [
                (f"{name}/off throughput (target >= 0.95)", f"{ratios[name]['throughput']:.3f}"),
                (f"{name}/off p50 (target <= 1.05)", f"{ratios[name]['p50']:.3f}"),
                (f"{name}/off CPU per order", f"{ratios[name]['cpu']:.3f}"),
            ]
        if any("scrapes" in r for r in runs[name]):
            rows.append(
                (
                    f"{name}: scrapes meanwhile, p50",
                    ", ".join(
                        f"{r.get('scrapes', 0)} @ {fmt_ms(r.get('scrape_p50', 0.0))}" for r in runs[name]
                    ),
                )
            )
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()

"""What monitoring costs the engine (issue 19), and what it costs any Celery app (the floor):
the engine benchmark (bench/engine.py's `engine`) and a bare Celery app, each with the metrics /
Flower's task events off and on, alternated in one run.

    python bench/monitoring.py [--orders 200] [--latency-samples 50] [--rounds 2] [--concurrency 2]
                               [--bare-tasks 1] [--variants off metrics on on+sent bare-off ...]

off:      SAS_METRICS=0 (no Redis writes per attempt), task events off, no Flower, no scrapes.
metrics:  SAS_METRICS=1 and /metrics scraped every SCRAPE_EVERY seconds; no task events.
on:       metrics + a real Flower and the workers' task events (what `make run` and compose run:
          Flower turns the workers' events on; task-sent events stay off by default).
on+sent:  on + the producers' task-sent events (CELERY_TASK_SEND_SENT_EVENT=1).
bare-off, bare-on, bare-on+sent: the floor - bench/baselines/bare_celery.py (no Django, our
          workers' settings) on the same broker, an order being `--bare-tasks` chained tasks that
          make the same three HTTP calls; with -E and a Flower on the bare app when "on".
Rounds rotate the variants so that the machine's drift falls on all. Printed per variant:
orders/s, the p50 submit->done, the CPU per order of the worker's main process, its pool, beat and
Flower (and, beside them, PostgreSQL, Redis and this process), Flower's tasks per order by name,
the ratios to the family's "off", and each "on" against its floor (target: cost <= 5%).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("SAS_BENCH_DB", "sasproject_bench_monitoring")
# The floor's bare Celery app (imported later) and its worker: a Redis key prefix of their own.
os.environ.setdefault("BARE_PREFIX", f"benchbare{os.getpid()}:")

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
    """CPU time (user + system) of the processes a variant runs, by group: the worker's main
    process (it receives the messages and sends the task events), its pool processes, beat,
    Flower, the bench database's PostgreSQL backends, Redis (shared with anything else on the
    machine), and this process (submits, polls, scrapes). Sampled every 0.2 s so that a process
    that exits counts up to its last sample; counted from `begin` on. Less sensitive than
    wall-clock figures to the other load on a shared machine."""

    # What the ratios compare (as before this meter had groups): the engine's own processes.
    ENGINE = ("worker main", "worker pool", "beat", "Flower")

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.seen: dict[tuple[int, float], float] = {}
        self.group_of: dict[tuple[int, float], str] = {}
        self.base: dict[tuple[int, float], float] = {}

    @staticmethod
    def classify(pid: int, name: str, cmdline: str, parent_cmdline: str) -> str | None:
        if pid == os.getpid():
            return "bench process"
        if name.startswith("postgres"):
            return "PostgreSQL" if os.environ.get("SAS_BENCH_DB", "") in cmdline else None
        if name.startswith("redis-server"):
            return "Redis"
        if "flower" in cmdline and "celery" in cmdline:
            return "Flower"
        if "bench-engine-" in cmdline or ("bare_celery" in cmdline and " worker" in cmdline):
            return "worker pool" if cmdline == parent_cmdline else "worker main"
        if "sasproject beat" in cmdline:
            return "beat"
        return None

    def sample(self) -> None:
        import psutil

        for proc in psutil.process_iter(["pid", "name", "cmdline", "create_time", "ppid"]):
            try:
                key = (proc.pid, proc.info["create_time"])
                if key not in self.group_of:
                    cmdline = " ".join(proc.info["cmdline"] or [])
                    try:
                        parent = " ".join(psutil.Process(proc.info["ppid"]).cmdline())
                        # Workers, beat and Flower: only this bench's (other sessions' tests
                        # run theirs on the same machine).
                        ours = any(p.pid == os.getpid() for p in proc.parents())
                    except (psutil.NoSuchProcess, psutil.AccessDenied):
                        parent, ours = "", False
                    group = self.classify(proc.pid, proc.info["name"] or "", cmdline, parent)
                    if group in self.ENGINE and not ours:
                        group = None
                    if group is None:
                        continue
                    self.group_of[key] = group
                times = proc.cpu_times()
                self.seen[key] = times.user + times.system
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.sample()

    def begin(self) -> None:
        """Count from now on: a process already running (Flower, PostgreSQL, Redis) counts only
        its CPU after this."""
        self.sample()
        self.base = dict(self.seen)
        self.start()

    def groups(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for key, seconds in self.seen.items():
            group = self.group_of[key]
            out[group] = out.get(group, 0.0) + seconds - self.base.get(key, 0.0)
        return out

    def total(self) -> float:
        groups = self.groups()
        return sum(groups.get(name, 0.0) for name in self.ENGINE)


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


@dataclass(frozen=True)
class Variant:
    bare: bool  # the bare Celery app (the floor) instead of the engine
    metrics: bool  # the engine's Redis counters, and /metrics scraped meanwhile
    flower: bool  # a Flower watching, the workers' task events on
    sent: bool  # the producers' task-sent events on too (every publish: one event more)


VARIANTS = {
    "off": Variant(bare=False, metrics=False, flower=False, sent=False),
    "metrics": Variant(bare=False, metrics=True, flower=False, sent=False),
    # What `make run` and compose run: Flower, which turns the workers' task events on.
    "on": Variant(bare=False, metrics=True, flower=True, sent=False),
    # ... and the producers' task-sent events (CELERY_TASK_SEND_SENT_EVENT=1), off by default.
    "on+sent": Variant(bare=False, metrics=True, flower=True, sent=True),
    "bare-off": Variant(bare=True, metrics=False, flower=False, sent=False),
    "bare-on": Variant(bare=True, metrics=False, flower=True, sent=False),
    "bare-on+sent": Variant(bare=True, metrics=False, flower=True, sent=True),
}
# What each variant's ratio is taken against (within its family: engine or bare Celery).
BASE = {"metrics": "off", "on": "off", "on+sent": "off", "bare-on": "bare-off", "bare-on+sent": "bare-off"}
FLOWER_LOGIN = "bench:bench"


def start_flower(app_module: str, env: dict[str, str]) -> tuple[Any, str]:
    from sastools.harness import Proc

    port = _free_port()
    flower = Proc(
        name="bench-flower",
        args=[
            sys.executable,
            "-m",
            "celery",
            "-A",
            app_module,
            "flower",
            "--address=127.0.0.1",
            f"--port={port}",
            f"--basic_auth={FLOWER_LOGIN}",
        ],
        log_path=log_dir() / "bench-flower.log",
        env=env,
    ).start(ready_marker=None)
    base = f"http://127.0.0.1:{port}"
    # The bench logs at WARNING: wait for Flower's port, not its INFO banner.
    wait_until(lambda: _answers(f"{base}/healthcheck"), timeout=60, interval=0.2, what="Flower to answer")
    return flower, base


def flower_tasks(base: str) -> dict[str, dict[str, int]]:
    """Flower's task list, counted by task name and state: how many tasks (and so events) an
    order costs, as Flower saw them."""
    import base64
    import urllib.request

    request = urllib.request.Request(f"{base}/api/tasks")
    request.add_header("Authorization", "Basic " + base64.b64encode(FLOWER_LOGIN.encode()).decode())
    with urllib.request.urlopen(request, timeout=30) as response:
        tasks = json.loads(response.read())
    counts: dict[str, dict[str, int]] = {}
    for task in tasks.values():
        by_state = counts.setdefault(task.get("name") or "?", {})
        by_state[task.get("state") or "?"] = by_state.get(task.get("state") or "?", 0) + 1
    return counts


def engine_measured(
    env: dict[str, str], concurrency: int, orders: int, samples: int, meter: CpuMeter
) -> dict:
    """bench/engine.py's `engine`, with the CPU meter running from the burst to the last latency
    sample only (the processes' start-up and the warm-up are not counted)."""
    from django.contrib.auth import get_user_model

    from bench.common import summary, truncate_engine
    from bench.engine import ENGINE_QUEUES, order_latencies, orders_burst, orders_warm
    from sastools.harness import celery_beat, celery_worker

    truncate_engine()
    user, _ = get_user_model().objects.get_or_create(username="bench")
    logs = log_dir()
    worker = celery_worker(
        name=f"bench-engine-{concurrency}",
        queues=ENGINE_QUEUES,
        log_dir=logs,
        env=env,
        concurrency=concurrency,
    ).start(ready_marker=None)  # the bench logs at WARNING: no " ready." line; the warm-up waits
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker=None)
    try:
        orders_warm(user.id)
        meter.begin()
        elapsed = orders_burst(user.id, orders)
        truncate_engine()
        latencies = order_latencies(user.id, samples)
        meter.stop.set()
        return {"orders_per_s": orders / elapsed, "latency_p50": summary(latencies)["p50"]}
    finally:
        meter.stop.set()
        beat.stop()
        worker.stop()
        truncate_engine()


def bare_measured(
    env: dict[str, str],
    concurrency: int,
    orders: int,
    samples: int,
    meter: CpuMeter,
    *,
    events: bool,
    sent: bool,
    tasks_per_order: int,
) -> dict:
    """The floor: the bare Celery app (bench/baselines/bare_celery.py: no Django, our workers'
    settings) on the same broker, an order being a chain of `tasks_per_order` tasks that make
    the same three HTTP calls to the simulator as the engine's agents."""
    from bench.baselines import bare_celery as bare
    from bench.common import summary
    from sastools.harness import Proc

    bare.app.conf.task_send_sent_event = sent
    worker = Proc(
        name="bench-bare",
        args=[
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.baselines.bare_celery",
            "worker",
            "-Q",
            bare.QUEUE,
            "-c",
            str(concurrency),
            "-P",
            "prefork",
            "-n",
            f"bench-bare-{concurrency}@%h",
            "--without-mingle",
            "--without-gossip",
            "-l",
            "WARNING",
            *(["-E"] if events else []),
        ],
        log_path=log_dir() / "bench-bare.log",
        env=env,
    ).start(ready_marker=None)
    redis = bare.redis.Redis.from_url(bare.REDIS_URL)

    def submit(*, done_key: str = "", counter_key: str = "") -> None:
        bare.submit_calls(tasks=tasks_per_order, done_key=done_key, counter_key=counter_key)

    try:
        bare._latencies(submit, 5, redis)  # warm-up and readiness
        meter.begin()
        elapsed = bare._burst(submit, orders, redis)
        latencies = bare._latencies(submit, samples, redis)
        meter.stop.set()
        return {"orders_per_s": orders / elapsed, "latency_p50": summary(latencies)["p50"]}
    finally:
        meter.stop.set()
        worker.stop()


def run_variant(
    base_env: dict[str, str], *, name: str, concurrency: int, orders: int, samples: int, bare_tasks: int
) -> dict:
    from celery import current_app
    from django.conf import settings

    from bench.common import baseline_env

    variant = VARIANTS[name]
    on = "1" if variant.flower else "0"
    sent = "1" if variant.sent else "0"
    if variant.bare:
        env = {**baseline_env(base_env), "BARE_TASK_SENT_EVENT": sent}
    else:
        env = {
            **base_env,
            "SAS_METRICS": "1" if variant.metrics else "0",
            # Flower turns the workers' task events on by itself within 5 s (enable_events);
            # on from the start here, so the whole measured span has them.
            "CELERY_WORKER_SEND_TASK_EVENTS": on,
            "CELERY_TASK_SEND_SENT_EVENT": sent,
        }
        # This process submits the orders (a producer of task-sent events too).
        settings.CELERY_TASK_SEND_SENT_EVENT = variant.sent
        current_app.conf.task_send_sent_event = variant.sent
        settings.SAS_MONITORING = {
            **settings.SAS_MONITORING,
            "METRICS": variant.metrics,
            "METRICS_TOKEN": TOKEN,
        }
    flower = scraper = None
    flower_base = ""
    if variant.flower:
        flower, flower_base = start_flower(
            "bench.baselines.bare_celery" if variant.bare else "sasproject", env
        )
    meter = CpuMeter()

    try:
        if variant.metrics:
            scraper = Scraper()
            scraper.start()
        if variant.bare:
            result = bare_measured(
                env,
                concurrency,
                orders,
                samples,
                meter,
                events=variant.flower,
                sent=variant.sent,
                tasks_per_order=bare_tasks,
            )
        else:
            result = engine_measured(env, concurrency, orders, samples, meter)
        if flower is not None:
            time.sleep(1)  # the last events
            result["flower_tasks"] = flower_tasks(flower_base)
    finally:
        if meter.is_alive():
            meter.join(timeout=5)
        if scraper is not None:
            scraper.stop.set()
            scraper.join(timeout=30)
        if flower is not None:
            flower.stop()
    measured = orders + samples
    result["cpu_ms_per_order"] = 1000 * meter.total() / measured
    result["cpu_ms_by_group"] = {group: 1000 * s / measured for group, s in sorted(meter.groups().items())}
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
    parser.add_argument(
        "--bare-tasks",
        type=int,
        default=2,
        help="tasks per order of the floor's bare Celery order (the engine's count is printed)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    env = bench_environment()
    from sastools.harness import simulator_process

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
                    bare_tasks=args.bare_tasks,
                )
                runs[name].append(result)
                groups = ", ".join(f"{g} {ms:.1f}" for g, ms in result["cpu_ms_by_group"].items())
                print(
                    f"round {round_ + 1} {name}: {result['orders_per_s']:.1f} orders/s, "
                    f"p50 {fmt_ms(result['latency_p50'])}, "
                    f"CPU {result['cpu_ms_per_order']:.1f} ms/order ({groups})",
                    flush=True,
                )
                if "flower_tasks" in result:
                    print(f"    Flower's tasks: {json.dumps(result['flower_tasks'])}", flush=True)
    finally:
        sim.stop()

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    def med_group(name: str, group: str) -> float:
        return statistics.median(r["cpu_ms_by_group"].get(group, 0.0) for r in runs[name])

    measured = args.orders + args.latency_samples
    print(
        f"\nworker processes: {args.concurrency}   rounds: {args.rounds}   orders: {args.orders} "
        f"(+ {args.latency_samples} one at a time)   bare tasks per order: {args.bare_tasks}"
    )
    rows = []
    ratios: dict[str, dict[str, float]] = {}
    group_names = sorted({g for rs in runs.values() for r in rs for g in r["cpu_ms_by_group"]})
    for name in names:
        rows += [
            (f"{name}: orders/s (median of rounds)", f"{med(name, 'orders_per_s'):.1f}"),
            (f"{name}: submit->Completed p50", fmt_ms(med(name, "latency_p50"))),
            (
                f"{name}: CPU per order (worker, pool, beat, Flower)",
                f"{med(name, 'cpu_ms_per_order'):.2f} ms",
            ),
            (
                f"{name}: CPU per order by process",
                ", ".join(f"{g} {med_group(name, g):.2f}" for g in group_names),
            ),
        ]
        for r in runs[name]:
            if "flower_tasks" in r:
                per_order = {
                    task: round(sum(states.values()) / measured, 2)
                    for task, states in r["flower_tasks"].items()
                }
                rows.append((f"{name}: Flower's tasks per order", json.dumps(per_order)))
                break
        base = BASE.get(name)
        if base in runs:
            ratios[name] = {
                "throughput": med(name, "orders_per_s") / med(base, "orders_per_s"),
                "p50": med(name, "latency_p50") / med(base, "latency_p50"),
                "cpu": med(name, "cpu_ms_per_order") / med(base, "cpu_ms_per_order"),
                "cpu_added_ms": med(name, "cpu_ms_per_order") - med(base, "cpu_ms_per_order"),
            }
            rows += [
                (f"{name}/{base} throughput (target >= 0.95)", f"{ratios[name]['throughput']:.3f}"),
                (f"{name}/{base} p50 (target <= 1.05)", f"{ratios[name]['p50']:.3f}"),
                (f"{name}/{base} CPU per order", f"{ratios[name]['cpu']:.3f}"),
                (f"{name} - {base}: CPU added per order", f"{ratios[name]['cpu_added_ms']:+.2f} ms"),
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
    for engine_name, bare_name in (("on", "bare-on"), ("on+sent", "bare-on+sent")):
        if engine_name in ratios and bare_name in ratios:
            e, b = ratios[engine_name], ratios[bare_name]
            rows += [
                (
                    f"{engine_name} vs the floor {bare_name}: CPU ratio / floor's",
                    f"{e['cpu']:.3f} / {b['cpu']:.3f}",
                ),
                (
                    f"{engine_name} vs the floor {bare_name}: CPU added per order",
                    f"{e['cpu_added_ms']:+.2f} ms / {b['cpu_added_ms']:+.2f} ms "
                    f"(x{e['cpu_added_ms'] / b['cpu_added_ms']:.2f})"
                    if b["cpu_added_ms"]
                    else "",
                ),
            ]
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "ratios": ratios}, indent=2))


if __name__ == "__main__":
    main()

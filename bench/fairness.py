"""Issue 18's fairness bench: does one customer's flood hold another customer back?

    python bench/fairness.py [--minutes 3] [--b-jobs 200] [--slow-ms 10000] [--order-every 3]
                             [--max-in-flight 8] [--claim-batch 8] [--schedule-to-start 120]
                             [--big-mb 400] [--json FILE]

One run, real processes laid out as the Procfile lays them out (control, dispatcher, one agents
worker for the order services, the webhook worker, the http worker, the long-jobs worker, beat,
the simulator), on the bench database:

  customer A has one every-minute http.call job (the simulator's /echo, instant) and places an
  order every --order-every seconds (with a callback, so the webhook worker works too);
  phase 1, "without B": A alone for --minutes whole minutes;
  phase 2, "with B": the same, while customer B floods with what the limits allow - --b-jobs
  every-minute http.call jobs at B's highest priority to a slow endpoint (/echo?delay_ms=
  --slow-ms), "run now" on them at the submit rate, and history exports kept in flight;
  then the webhook worker's RSS while one delivery gets a --big-mb answer (a server in this
  process streams it; it counts the bytes the worker actually read).

A's job and B's jobs have the same priority: the customers' highest (scheduler.limits'
CUSTOMER_PRIORITY_MAX where that exists, else -10), which is also a customer job's default
there - fairness is within a priority (docs/operating/fairness.md).

Printed: A's job start lag (occurrence -> first claim) p50/p99 and its skipped occurrences, A's
order submit -> Completed p50/p99, the webhook worker's peak RSS, each with B against without B,
with the targets of issue 18 met / missed; where the time of A's orders and job runs goes; B's
volume. Figures and how they were taken: bench/README.md, "Fairness".
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, log_dir, percentile

ORDER = {"items": [{"sku": "B-1", "quantity": 1}], "amount": "9.99", "currency": "EUR"}
CONTROL_QUEUES = "scheduler,supervisor,default"
ORDER_AGENT_QUEUES = "agent.inventory,agent.payment,agent.shipping"


# -- small helpers -------------------------------------------------------------------------------


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def next_boundary(lead: float) -> float:
    return math.ceil((time.time() + lead) / 60.0) * 60.0


def sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.5))


def rss_kb(pid: int) -> int:
    """Resident set of `pid` and its children (a prefork worker's pool), from /proc."""
    total = 0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


class RssSampler(threading.Thread):
    """Samples one process's RSS every `interval` s; `peak(since, until)` reads a window."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.samples: list[tuple[float, int]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            self.samples.append((time.time(), rss_kb(self.pid)))
            time.sleep(self.interval)

    def window(self, since: float, until: float) -> list[int]:
        return [kb for t, kb in self.samples if since <= t <= until]


# -- HTTP receivers in this process: A's callbacks, and the 400 MB answer --------------------------


class Receivers:
    def __init__(self, big_mb: int) -> None:
        self.big_bytes = big_mb * 1024 * 1024
        self.big_sent = 0
        self.big_started = threading.Event()
        self.big_done = threading.Event()
        receivers = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if self.path.startswith("/big"):
                    receivers.serve_big(self)
                    return
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def serve_big(self, handler: BaseHTTPRequestHandler) -> None:
        chunk = b"x" * (1024 * 1024)
        handler.send_response(200)
        handler.send_header("Content-Type", "text/plain")
        handler.send_header("Content-Length", str(self.big_bytes))
        handler.end_headers()
        self.big_started.set()
        try:
            while self.big_sent < self.big_bytes:
                piece = chunk[: self.big_bytes - self.big_sent]
                handler.wfile.write(piece)
                self.big_sent += len(piece)
        except OSError:
            pass  # the reader hung up (a bounded read stops early): what we want to see
        finally:
            self.big_done.set()


# -- the stack -------------------------------------------------------------------------------------


def start_stack(env: dict[str, str], logs: Path) -> dict[str, Any]:
    from sastools.harness import celery_beat, celery_worker, simulator_process

    procs: dict[str, Any] = {}
    # Workers log at INFO: their " ready." line is how the stack knows they started.
    env = {**env, "LOG_LEVEL": "INFO"}

    def add(name: str, proc: Any, marker: str) -> None:
        procs[name] = proc
        try:
            proc.start(ready_marker=marker, timeout=180)
        except BaseException:
            stop_stack(procs)  # what started so far; a loaded machine can be slow to start one
            raise

    add(
        "simulator", simulator_process(url=env["SIMULATOR_URL"], log_dir=logs, env=env), "SIMULATOR_LISTENING"
    )
    agent_env = {**env, "DATABASE_POOL_MAX_SIZE": "2"}
    layout = [
        ("control", CONTROL_QUEUES, env, 1, "prefork"),
        ("dispatcher", "jobs", env, 1, "prefork"),
        ("agents-orders", ORDER_AGENT_QUEUES, agent_env, 8, "threads"),
        ("agents-webhook", "agent.webhook", agent_env, 8, "threads"),
        ("agents-http", "agent.http", agent_env, 8, "threads"),
        ("longjobs", "agent.catalogue,agent.exports", env, 2, "prefork"),
    ]
    for name, queues, penv, concurrency, pool in layout:
        add(
            name,
            celery_worker(
                name=name, queues=queues, log_dir=logs, env=penv, concurrency=concurrency, pool=pool
            ),
            " ready.",
        )
    add("beat", celery_beat(log_dir=logs, env=env), "beat: Starting")
    return procs


def stop_stack(procs: dict[str, Any]) -> None:
    for proc in reversed(list(procs.values())):
        proc.stop()


def reset() -> None:
    from bench.common import truncate_engine

    truncate_engine()
    sql("TRUNCATE scheduler_job, scheduler_scheduledjob, webhooks_webhooksubscription CASCADE")
    sql("TRUNCATE exports_export CASCADE")


def users() -> tuple[int, int]:
    from django.contrib.auth import get_user_model

    model = get_user_model()
    a, _ = model.objects.get_or_create(username="fairbench-a")
    b, _ = model.objects.get_or_create(username="fairbench-b")
    return a.pk, b.pk


def customer_priority() -> int:
    import importlib

    try:  # issue 18's priority band (scheduler/limits.py), where it has landed
        return int(importlib.import_module("scheduler.limits").CUSTOMER_PRIORITY_MAX)
    except (ImportError, AttributeError):
        return -10


def limit(name: str, default: int) -> int:
    """A per-user quota where one is set (SAS_QUOTAS, issue 18), else `default` (the issue's
    flood)."""
    from django.conf import settings

    value = int(getattr(settings, "SAS_QUOTAS", {}).get(name, 0) or 0)
    return min(default, value) if value else default


# -- load generators ---------------------------------------------------------------------------------


class Loop(threading.Thread):
    """Calls `step()` every `every` seconds until stopped; counts and keeps errors."""

    def __init__(self, name: str, every: float, step: Any) -> None:
        super().__init__(daemon=True, name=name)
        self.every, self.step = every, step
        self.stopped = threading.Event()
        self.calls = 0
        self.errors: list[str] = []

    def run(self) -> None:
        from django.db import close_old_connections

        next_at = time.time()
        while not self.stopped.is_set():
            try:
                self.step()
                self.calls += 1
            except Exception as exc:  # a refusal (quota, throttle) is part of the picture
                self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            finally:
                close_old_connections()
            next_at += self.every
            self.stopped.wait(max(0.0, next_at - time.time()))


def a_job(a_id: int, sim: str, priority: int) -> int:
    from agents.http_call import HTTP_CALL_WORKFLOW
    from scheduler.services import job_create

    job = job_create(
        owner_id=a_id,
        name="a-every-minute",
        workflow=HTTP_CALL_WORKFLOW,
        input={"method": "POST", "url": f"{sim}/echo", "body": {"from": "a"}},
        cron="* * * * *",
        priority=priority,
        by_staff=False,
    )
    return job.pk


def b_jobs(b_id: int, sim: str, priority: int, n: int, slow_ms: int) -> list[int]:
    from agents.http_call import HTTP_CALL_WORKFLOW
    from scheduler.services import job_create

    made = []
    for i in range(n):
        try:
            job = job_create(
                owner_id=b_id,
                name=f"b-flood-{i}",
                workflow=HTTP_CALL_WORKFLOW,
                input={
                    "method": "POST",
                    "url": f"{sim}/echo?delay_ms={slow_ms}",
                    "body": {"from": "b", "i": i},
                },
                cron="* * * * *",
                priority=priority,
                by_staff=False,
            )
        except Exception as exc:  # the active-jobs quota: B got what the limits allow
            print(f"  B's job {i} refused: {exc}"[:200], flush=True)
            break
        made.append(job.pk)
    return made


# -- measuring ---------------------------------------------------------------------------------------


def job_lags(job_id: int, start: float, end: float) -> dict[str, Any]:
    rows = sql(
        """
        SELECT extract(epoch FROM r.scheduled_for)::float8, extract(epoch FROM r.created_at)::float8,
               extract(epoch FROM min(h.started_at))::float8, extract(epoch FROM r.finished_at)::float8,
               r.state
        FROM scheduler_run AS r
        LEFT JOIN scheduler_taskexecutionhistory AS h ON h.run_id = r.id AND h.kind = 'attempt'
        WHERE r.job_id = %s AND r.scheduled_for >= to_timestamp(%s) AND r.scheduled_for < to_timestamp(%s)
        GROUP BY r.id ORDER BY r.scheduled_for
        """,
        [job_id, start, end],
    )
    skipped = sql(
        """
        SELECT count(*) FROM scheduler_taskexecutionhistory
        WHERE job_id = %s AND kind = 'job' AND status = 'skipped'
          AND scheduled_for >= to_timestamp(%s) AND scheduled_for < to_timestamp(%s)
        """,
        [job_id, start, end],
    )[0][0]
    expected = round((end - start) / 60)
    started = [r[2] - r[0] for r in rows if r[2] is not None]
    return {
        "expected": expected,
        "runs": len(rows),
        "skipped": int(skipped) + max(0, expected - len(rows)),
        "start_lag": started,
        "written_lag": [r[1] - r[0] for r in rows],
        "done_lag": [r[3] - r[0] for r in rows if r[3] is not None],
        "not_completed": sum(1 for r in rows if r[4] != "completed"),
    }


def order_workflow() -> str:
    from orders.workflows import ORDER_WORKFLOW

    return ORDER_WORKFLOW


def order_figures(a_id: int, start: float, end: float) -> dict[str, Any]:
    rows = sql(
        """
        SELECT r.id, extract(epoch FROM r.created_at)::float8, extract(epoch FROM r.finished_at)::float8,
               r.state
        FROM scheduler_run AS r
        WHERE r.owner_id = %s AND r.workflow = %s AND r.job_id IS NULL
          AND r.created_at >= to_timestamp(%s) AND r.created_at < to_timestamp(%s)
        """,
        [a_id, order_workflow(), start, end],
    )
    done = [r[2] - r[1] for r in rows if r[3] == "completed" and r[2] is not None]
    # Where the time goes: per order, time in attempts (claim -> attempt closed) against time
    # waiting to be claimed (from the run's submit or the previous attempt's end).
    parts = sql(
        """
        SELECT r.id, extract(epoch FROM r.created_at)::float8,
               array_agg(extract(epoch FROM h.started_at)::float8 ORDER BY h.started_at),
               array_agg(extract(epoch FROM coalesce(h.ended_at, h.started_at))::float8 ORDER BY h.started_at)
        FROM scheduler_run AS r
        JOIN scheduler_taskexecutionhistory AS h ON h.run_id = r.id AND h.kind = 'attempt'
        WHERE r.owner_id = %s AND r.workflow = %s AND r.state = 'completed'
          AND r.created_at >= to_timestamp(%s) AND r.created_at < to_timestamp(%s)
        GROUP BY r.id
        """,
        [a_id, order_workflow(), start, end],
    )
    waiting, working = [], []
    for _, created, starts, ends in parts:
        before = created
        wait = work = 0.0
        for s, e in zip(starts, ends, strict=True):
            wait += max(0.0, s - before)
            work += max(0.0, e - s)
            before = e
        waiting.append(wait)
        working.append(work)
    return {
        "placed": len(rows),
        "latency": done,
        "not_completed": len(rows) - len(done),
        "wait_mean": sum(waiting) / len(waiting) if waiting else float("nan"),
        "work_mean": sum(working) / len(working) if working else float("nan"),
    }


def b_volume(b_id: int, start: float, end: float) -> dict[str, int]:
    rows = sql(
        """
        SELECT r.workflow, r.state, count(*) FROM scheduler_run AS r
        WHERE r.owner_id = %s AND r.created_at >= to_timestamp(%s) AND r.created_at < to_timestamp(%s)
        GROUP BY 1, 2
        """,
        [b_id, start, end],
    )
    out: dict[str, int] = {}
    for workflow, state, n in rows:
        out[f"{workflow}:{state}"] = int(n)
    skipped = sql(
        """
        SELECT count(*) FROM scheduler_run
        WHERE owner_id = %s AND error LIKE 'skipped: not started within%%'
        """,
        [b_id],
    )[0][0]
    out["skipped (schedule-to-start, so far)"] = int(skipped)
    return out


def phase(
    name: str,
    *,
    minutes: int,
    a_id: int,
    a_job_id: int,
    receivers: Receivers,
    order_every: float,
    before_window: Any = None,
) -> dict[str, Any]:
    from orders.services import order_submit

    start = next_boundary(20)
    if before_window is not None:
        before_window()
        start = max(start, next_boundary(5))
    end = start + 60 * minutes
    print(
        f"{name}: window {datetime.fromtimestamp(start, UTC):%H:%M:%S} - "
        f"{datetime.fromtimestamp(end, UTC):%H:%M:%S} UTC",
        flush=True,
    )
    sleep_until(start)
    orders = Loop(
        "a-orders",
        order_every,
        lambda: order_submit(owner_id=a_id, data=ORDER, callback_url=f"{receivers.url}/hook"),
    )
    orders.start()
    sleep_until(end)
    orders.stopped.set()
    orders.join()
    # A's last orders and its last occurrence finish (at most two minutes).
    deadline = time.time() + 120
    while time.time() < deadline:
        left = sql(
            "SELECT count(*) FROM scheduler_run WHERE owner_id = %s AND state IN ('pending', 'running') "
            "AND created_at < to_timestamp(%s)",
            [a_id, end],
        )[0][0]
        if not left:
            break
        time.sleep(1)
    return {
        "start": start,
        "end": end,
        "job": job_lags(a_job_id, start, end),
        "orders": order_figures(a_id, start, end),
        "order_errors": orders.errors[:3],
    }


def big_answer(a_id: int, receivers: Receivers, sampler: RssSampler) -> dict[str, Any]:
    """The webhook worker's RSS while one of A's deliveries gets a --big-mb answer."""
    from orders.services import order_submit

    time.sleep(3)
    t0 = time.time()
    baseline = max(sampler.window(t0 - 3, t0) or [0])
    order_submit(owner_id=a_id, data=ORDER, callback_url=f"{receivers.url}/big")
    started = receivers.big_started.wait(60)
    if started:
        receivers.big_done.wait(120)
    time.sleep(3)
    t1 = time.time()
    peak = max(sampler.window(t0, t1) or [0])
    return {
        "answer_started": started,
        "bytes_sent": receivers.big_sent,
        "baseline_mb": baseline / 1024,
        "peak_mb": peak / 1024,
        "growth_mb": (peak - baseline) / 1024,
    }


# -- report ----------------------------------------------------------------------------------------


def _p(values: list[float], q: float) -> float:
    return percentile(values, q) if values else float("nan")


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(r: dict[str, Any]) -> None:
    alone, flood = r["without_b"], r["with_b"]
    ja, jb = alone["job"], flood["job"]
    oa, ob = alone["orders"], flood["orders"]
    lag99_a, lag99_b = _p(ja["start_lag"], 0.99), _p(jb["start_lag"], 0.99)
    o50a, o50b = _p(oa["latency"], 0.5), _p(ob["latency"], 0.5)
    o99a, o99b = _p(oa["latency"], 0.99), _p(ob["latency"], 0.99)
    rss = r["rss"]
    lag = (
        f"{_p(ja['start_lag'], 0.5):.2f} / {lag99_a:.2f}",
        f"{_p(jb['start_lag'], 0.5):.2f} / {lag99_b:.2f}",
    )
    runs = (
        f"{ja['runs']} / {ja['skipped']} ({ja['expected']})",
        f"{jb['runs']} / {jb['skipped']} ({jb['expected']})",
    )
    done = (
        f"{_p(ja['done_lag'], 0.5):.2f} / {_p(ja['done_lag'], 0.99):.2f}",
        f"{_p(jb['done_lag'], 0.5):.2f} / {_p(jb['done_lag'], 0.99):.2f}",
    )
    split = (
        f"{oa['wait_mean'] * 1000:.0f} / {oa['work_mean'] * 1000:.0f}",
        f"{ob['wait_mean'] * 1000:.0f} / {ob['work_mean'] * 1000:.0f}",
    )
    peaks = f"{r['rss_peak_without_b']:.0f} | {r['rss_peak_with_b']:.0f}"
    big = f"{rss['baseline_mb']:.0f} -> {rss['peak_mb']:.0f}"
    sent = f"+{rss['growth_mb']:.0f} MB, {rss['bytes_sent'] / 2**20:.0f} MB sent"
    lines = [
        "| | without B | with B | with B : without B | target |",
        "|---|---|---|---|---|",
        f"| A's job start lag p50 / p99 (s) | {lag[0]} | {lag[1]} | p99 +{lag99_b - lag99_a:.2f} s "
        f"| p99 <= without + 2 s: **{verdict(lag99_b <= lag99_a + 2)}** |",
        f"| A's occurrences: run / skipped (expected) | {runs[0]} | {runs[1]} | "
        f"| none skipped: **{verdict(jb['skipped'] == 0)}** |",
        f"| A's job run done lag p50 / p99 (s) | {done[0]} | {done[1]} | | reported |",
        f"| A's orders placed / completed | {oa['placed']} / {len(oa['latency'])} | "
        f"{ob['placed']} / {len(ob['latency'])} | | |",
        f"| A's order submit -> Completed p50 (ms) | {o50a * 1000:.0f} | {o50b * 1000:.0f} | "
        f"**{o50b / o50a:.2f}** | <= 1.5: **{verdict(o50b <= 1.5 * o50a)}** |",
        f"| A's order submit -> Completed p99 (ms) | {o99a * 1000:.0f} | {o99b * 1000:.0f} | "
        f"**{o99b / o99a:.2f}** | <= 2: **{verdict(o99b <= 2 * o99a)}** |",
        f"| A's order: mean ms waiting for claims / in attempts | {split[0]} | {split[1]} | | reported |",
        f"| webhook worker peak RSS in the phase (MB) | {peaks} | | reported |",
        f"| webhook worker RSS during a {r['args']['big_mb']} MB answer (MB) | {big} | | {sent} "
        f"| <= +16 MB: **{verdict(rss['growth_mb'] <= 16)}** |",
    ]
    print("\n".join(lines))
    print(f"\nB's volume in its window: {json.dumps(r['b_volume'])}")
    print(f"B's jobs: {r['b_jobs']}; run-now calls {r['b_run_now']}; exports requested {r['b_exports']}")
    if r["b_errors"]:
        print(f"B's refusals (first few): {r['b_errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=int, default=3, help="whole minutes per phase")
    parser.add_argument("--b-jobs", type=int, default=200, help="B's every-minute jobs (capped by its quota)")
    parser.add_argument("--slow-ms", type=int, default=10_000, help="B's endpoint answers after this long")
    parser.add_argument("--order-every", type=float, default=3.0, help="A places an order every N s")
    parser.add_argument(
        "--b-exports", type=int, default=10, help="B's exports kept in flight (capped by quota)"
    )
    parser.add_argument("--max-in-flight", type=int, default=8, help="SAS_MAX_IN_FLIGHT for the stack")
    parser.add_argument("--claim-batch", type=int, default=8, help="SAS_CLAIM_BATCH for the stack")
    parser.add_argument("--schedule-to-start", type=float, default=None, help="SAS_SCHEDULE_TO_START (s)")
    parser.add_argument("--big-mb", type=int, default=400)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    os.environ["SAS_MAX_IN_FLIGHT"] = str(args.max_in_flight)
    os.environ["SAS_CLAIM_BATCH"] = str(args.claim_batch)
    if args.schedule_to_start is not None:
        os.environ["SAS_SCHEDULE_TO_START"] = str(args.schedule_to_start)
    # A's callback receivers listen on this machine's loopback (a customer's would be on a public
    # host): the egress policy must let callbacks reach it (SAS_CALLBACK_PRIVATE_HOSTS).
    os.environ["SAS_CALLBACK_PRIVATE_HOSTS"] = "127.0.0.1"
    env = bench_environment()
    env["PYTHONUNBUFFERED"] = "1"
    from exports.services import export_request
    from scheduler.services import job_delete, job_run_now

    reset()
    a_id, b_id = users()
    priority = customer_priority()
    sim = env["SIMULATOR_URL"]
    receivers = Receivers(args.big_mb)
    logs = log_dir()
    print(f"logs in {logs}; A's and B's jobs at priority {priority}", flush=True)
    procs = start_stack(env, logs)
    sampler = RssSampler(procs["agents-webhook"].pid)
    sampler.start()
    result: dict[str, Any] = {"args": vars(args) | {"json": str(args.json) if args.json else None}}
    try:
        a_job_id = a_job(a_id, sim, priority)
        alone = phase(
            "without B",
            minutes=args.minutes,
            a_id=a_id,
            a_job_id=a_job_id,
            receivers=receivers,
            order_every=args.order_every,
        )
        made: list[int] = []
        flood: list[Loop] = []

        def b_starts() -> None:
            n = limit("ACTIVE_JOBS", args.b_jobs)
            made.extend(b_jobs(b_id, sim, priority, n, args.slow_ms))
            print(f"  B: {len(made)} every-minute jobs to a {args.slow_ms} ms endpoint", flush=True)
            rate = 1.0  # "run now" at the submit rate (SAS_SUBMIT_RATE, 60/minute)
            turn = iter(range(10**9))
            flood.append(
                Loop(
                    "b-run-now",
                    rate,
                    lambda: job_run_now(job_id=made[next(turn) % len(made)], by_staff=False),
                )
            )
            exports_cap = limit("EXPORTS_IN_FLIGHT", args.b_exports)

            def keep_exports() -> None:
                going = sql(
                    "SELECT count(*) FROM scheduler_run WHERE owner_id = %s AND workflow LIKE 'exports.%%' "
                    "AND state IN ('pending', 'running')",
                    [b_id],
                )[0][0]
                for _ in range(max(0, exports_cap - int(going))):
                    export_request(owner_id=b_id)

            flood.append(Loop("b-exports", 5.0, keep_exports))
            for loop in flood:
                loop.start()

        with_b = phase(
            "with B",
            minutes=args.minutes,
            a_id=a_id,
            a_job_id=a_job_id,
            receivers=receivers,
            order_every=args.order_every,
            before_window=b_starts,
        )
        for loop in flood:
            loop.stopped.set()
        result["b_volume"] = b_volume(b_id, with_b["start"] - 60, with_b["end"])
        result["b_jobs"] = len(made)
        result["b_run_now"] = flood[0].calls if flood else 0
        result["b_exports"] = sql("SELECT count(*) FROM exports_export WHERE owner_id = %s", [b_id])[0][0]
        result["b_errors"] = sorted({e for loop in flood for e in loop.errors})[:5]
        for job_id in made:
            job_delete(job_id=job_id)
        result["without_b"], result["with_b"] = alone, with_b
        result["rss_peak_without_b"] = max(sampler.window(alone["start"], alone["end"]) or [0]) / 1024
        result["rss_peak_with_b"] = max(sampler.window(with_b["start"], with_b["end"]) or [0]) / 1024
        result["rss"] = big_answer(a_id, receivers, sampler)
    finally:
        sampler.stopped.set()
        stop_stack(procs)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()

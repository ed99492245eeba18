"""`python -m soak`: start the stack, measure its capacity, drive half of it for `--minutes` while
injecting the seeded faults, drain, check every invariant, print the report; exit 1 on any
violation (or if the checker misses the violations planted in a copy of the facts)."""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from simulator.client import SimulatorControl

from . import check
from .faults import Fault, Injector
from .load import ORDER, post
from .stack import READY, REPO_ROOT, SWEEP_SECONDS, Stack, log_offset, wait_ready

# Seconds a step may stay Processing past complete_by + one sweep beyond what the injected
# outages explain: a sweep's own run on 2 shared cores, a worker's reconnect backoff.
GRACE_SECONDS = 10.0
UNFINISHED = ("pending", "running", "compensating")

SETUP = """
import json
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from sasproject.tokens.services import api_token_rotate
from scheduler.services.jobs import job_create
users = get_user_model()
tokens, jobs = [], []
for i in range(3):
    user, _ = users.objects.get_or_create(username=f"soak-customer-{i}")
    tokens.append(api_token_rotate(user_id=user.pk).key)
    jobs.append(job_create(owner_id=user.id, by_staff=False, name="every minute",
        workflow="order_fulfilment", input=%(order)s, cron="* * * * *").id)
staff, _ = users.objects.get_or_create(username="soak-staff", defaults={"is_staff": True})
# Repricing is staff work: the Operators role holds it (issue 26), not is_staff alone.
staff.groups.add(Group.objects.get(name="Operators"))
tokens.append(api_token_rotate(user_id=staff.pk).key)
jobs.append(job_create(owner_id=staff.id, by_staff=True, name="reprice every minute",
    workflow="catalogue.reprice", input={"percent": "1"}, cron="* * * * *").id)
print("SOAK=" + json.dumps({"tokens": tokens, "jobs": jobs}))
"""


def say(text: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {text}", flush=True)


class Monitor(threading.Thread):
    """Once a second: the steps Processing past complete_by (+ one sweep), worst per step."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.halt = threading.Event()
        # step id -> (seconds past complete_by, complete_by epoch, observed epoch), the worst seen
        self.overdue: dict[int, tuple[float, float, float]] = {}
        self.samples = 0

    def run(self) -> None:
        while not self.halt.wait(1.0):
            try:
                rows = self.stack.query(
                    "SELECT id, extract(epoch FROM now() - complete_by), extract(epoch FROM complete_by),"
                    " extract(epoch FROM now()) FROM scheduler_step"
                    " WHERE process_state = 'processing' AND complete_by < now() - make_interval(secs => %s)",
                    (SWEEP_SECONDS,),
                )
            except psycopg.Error:  # the database is being restarted: that is a fault, not ours to judge
                continue
            self.samples += 1
            for step_id, over, due, seen in rows:
                if float(over) > self.overdue.get(step_id, (0.0, 0.0, 0.0))[0]:
                    self.overdue[step_id] = (float(over), float(due), float(seen))


class Keeper(threading.Thread):
    """The process manager (systemd's Restart=always, compose's `restart:`): a stack process that
    exited on its own - not one a fault is killing - is started again, and the exit is reported
    with the last CRITICAL line of its log."""

    def __init__(self, stack: Stack, injector: Injector) -> None:
        super().__init__(daemon=True)
        self.stack, self.injector = stack, injector
        self.halt = threading.Event()
        self.exits: list[tuple[float, str, str]] = []
        self.outages: list[Fault] = []

    def run(self) -> None:
        while not self.halt.wait(1.0):
            for name, proc in list(self.stack.procs.items()):
                lock = self.injector.lock(name)
                if proc.alive() or not lock.acquire(blocking=False):
                    continue
                try:
                    if proc.alive():
                        continue
                    critical = [line for line in proc.log().splitlines() if "CRITICAL" in line]
                    why = (
                        critical[-1][:200] if critical else f"exit {proc.popen.poll() if proc.popen else '?'}"
                    )
                    self.exits.append((time.time(), name, why))
                    say(f"{name} exited on its own ({why}); started again")
                    outage = Fault(f"exit:{name}", name, time.time())
                    offset = log_offset(proc)
                    self.stack.restart(name)
                    wait_ready(proc, READY.get(name, " ready."), timeout=90, offset=offset)
                    outage.end = time.time()
                    self.outages.append(outage)
                finally:
                    lock.release()


def impaired_seconds(faults: list[Fault], start: float, end: float) -> float:
    spans = sorted((max(f.start, start), min(f.end, end)) for f in faults if f.impairing)
    total, reach = 0.0, start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def stuck_steps(monitor: Monitor, faults: list[Fault]) -> tuple[dict[int, float], float]:
    """Steps whose time past complete_by the outages do not explain; and the longest stuck."""
    excess: dict[int, float] = {}
    longest = 0.0
    for step_id, (over, due, seen) in monitor.overdue.items():
        longest = max(longest, over)
        left = over - SWEEP_SECONDS - GRACE_SECONDS - impaired_seconds(faults, due, seen)
        if left > 0:
            excess[step_id] = left
    return excess, longest


def calibrate(stack: Stack, token: str, orders: int) -> float:
    """Orders per second the stack completes from a burst of `orders`, without faults."""
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: post(f"{stack.web_url}/api/orders/", token, ORDER), range(orders)))
    ids = [a.get("id") for s, a in answers if s in (200, 201) and isinstance(a, dict)]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        left = stack.query(
            "SELECT count(*) FROM scheduler_run WHERE correlation_id = ANY(%s) AND state = ANY(%s)",
            ([str(i) for i in ids], list(UNFINISHED)),
        )[0][0]
        if not left:
            break
        time.sleep(0.2)
    return len(ids) / (time.monotonic() - began)


def drained(stack: Stack) -> dict[str, int]:
    """What still holds the drain up (empty: drained)."""
    rows = stack.query(
        "SELECT 'runs unfinished', count(*) FROM scheduler_run WHERE state = ANY(%s)"
        " UNION ALL SELECT 'steps processing', count(*) FROM scheduler_step"
        "   WHERE process_state = 'processing'"
        " UNION ALL SELECT 'one-off occurrences due', count(*) FROM scheduler_scheduledjob sj"
        "   JOIN scheduler_job j ON j.id = sj.job_id WHERE j.enabled AND NOT j.is_recurring"
        " UNION ALL SELECT 'transient alerts open', count(*) FROM alerting_alert"
        "   WHERE state <> 'resolved' AND kind = ANY(%s)",
        (list(UNFINISHED), sorted(check.TRANSIENT_ALERT_KINDS)),
    )
    return {what: int(n) for what, n in rows if n}


def gather(
    stack: Stack, jobs: list[int], window_end: dict[int, datetime], monitor_stuck: dict[int, float]
) -> check.Facts:
    q = stack.query
    f = check.Facts()
    f.runs = [
        dict(zip(("id", "workflow", "state", "job_id", "scheduled_for", "job_attempt"), r, strict=True))
        for r in q("SELECT id::text, workflow, state, job_id, scheduled_for, job_attempt FROM scheduler_run")
    ]
    f.steps = [
        dict(
            zip(
                ("id", "run_id", "name", "kind", "process_state", "attempts", "error_permanent"),
                r,
                strict=True,
            )
        )
        for r in q(
            "SELECT id, run_id::text, name, kind, process_state, attempts, error_permanent"
            " FROM scheduler_step"
        )
    ]
    f.attempts = [
        (int(s), int(n), str(st), bool(ended))
        for s, n, st, ended in q(
            "SELECT step_id, (detail->>'attempt')::int, status, ended_at IS NOT NULL"
            " FROM scheduler_taskexecutionhistory WHERE kind = 'attempt'"
        )
    ]
    f.jobs = [
        dict(zip(("id", "cron", "timezone", "created_at"), r, strict=True))
        for r in q("SELECT id, cron, timezone, created_at FROM scheduler_job WHERE id = ANY(%s)", (jobs,))
    ]
    f.occurrences = check.window_occurrences(expand, f.jobs, window_end)
    f.skips = [
        (int(j), t, d or {})
        for j, t, d in q(
            "SELECT job_id, scheduled_for, detail FROM scheduler_taskexecutionhistory"
            " WHERE kind = 'job' AND status = 'skipped' AND job_id = ANY(%s)",
            (jobs,),
        )
    ]
    f.pages = [
        (str(r), int(a), int(b), int(n))
        for r, a, b, n in q("SELECT run_id::text, page_start, page_end, rows FROM catalogue_repriceledger")
    ]
    f.products = int(q("SELECT count(*) FROM catalogue_product")[0][0])
    f.ledger = SimulatorControl(stack.sim_url, timeout=30).ledger()
    f.alerts = [
        dict(zip(("id", "kind", "key", "state", "created_at", "resolved_at", "run_ids"), r, strict=True))
        for r in q(
            "SELECT a.id, a.kind, a.key, a.state, a.created_at, a.resolved_at,"
            " array_remove(array_agg(DISTINCT l.run_id::text) || array_agg(DISTINCT a.run_id::text), NULL)"
            " FROM alerting_alert a LEFT JOIN alerting_alertrun l ON l.alert_id = a.id GROUP BY a.id"
        )
    ]
    f.stuck = monitor_stuck
    return f


def expand(job: dict[str, Any], first: datetime, last: datetime) -> list[datetime]:
    """A job's fire times from `first` to `last`, both included."""
    from scheduler.dispatcher.cron import cron_between

    times, _ = cron_between(
        job["cron"], job["timezone"], after=first - timedelta(microseconds=1), until=last, limit=100_000
    )
    return times


OPERATION_OF = {
    "agents-inventory": "agents.inventory.%",
    "agents-payment": "agents.payment.%",
    "agents-shipping": "agents.shipping.%",
    "longjobs": "agents.catalogue.%",
    "simulator": "agents.%",
}


def recovery(stack: Stack, fault: Fault) -> float | None:
    """Seconds from the fault's end to the next attempt that succeeded (of the steps the fault
    touched: the killed agent's, or any); for the dispatcher, to the next job run it started."""
    if fault.target == "dispatcher":  # the next job occurrence it started
        rows = stack.query(
            "SELECT extract(epoch FROM min(created_at) - to_timestamp(%s)) FROM scheduler_run"
            " WHERE job_id IS NOT NULL AND created_at > to_timestamp(%s)",
            (fault.end, fault.end),
        )
        value = rows[0][0]
        return None if value is None else max(0.0, float(value))
    pattern = OPERATION_OF.get(fault.target.split(" ")[0], "%")
    rows = stack.query(
        "SELECT extract(epoch FROM min(h.ended_at) - to_timestamp(%s)) FROM scheduler_taskexecutionhistory h"
        " JOIN scheduler_step s ON s.id = h.step_id WHERE h.kind = 'attempt' AND h.status = 'succeeded'"
        " AND h.ended_at > to_timestamp(%s) AND s.operation LIKE %s",
        (fault.end, fault.end, pattern),
    )
    value = rows[0][0]
    return None if value is None else max(0.0, float(value))


def load_table(stack: Stack, load_out: Path, began: float) -> list[str]:
    per_minute: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in load_out.read_text().splitlines():
        item = json.loads(line)
        minute = int((item["t"] - began) // 60)
        status = int(item["status"])
        outcome = "ok" if 200 <= status < 300 else ("no answer" if status == 0 else f"{status}")
        per_minute[minute][f"{item['kind']} {outcome}"] += 1
    done = dict(
        stack.query(
            "SELECT floor((extract(epoch FROM finished_at) - %s) / 60)::int, count(*) FROM scheduler_run"
            " WHERE finished_at IS NOT NULL GROUP BY 1",
            (began,),
        )
    )
    lines = []
    for minute in sorted(per_minute):
        counts = per_minute[minute]
        sent = sum(n for k, n in counts.items() if k.startswith("order "))
        ok = counts["order ok"]
        others = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()) if k != "order ok")
        lines.append(
            f"  minute {minute + 1}: orders accepted {ok}/{sent} ({ok / 60:.2f}/s), runs finished"
            f" {done.get(minute, 0)}; {others}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", "1")))
    parser.add_argument("--broker", choices=("redis", "rabbitmq"), default="redis")
    parser.add_argument("--max-rate", type=float, default=3.0, help="orders/s at most, whatever the capacity")
    parser.add_argument("--calibration-orders", type=int, default=30)
    parser.add_argument(
        "--drain-timeout", type=float, default=None, help="seconds (default: 90 + 10 per minute)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs directory")
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    drain_timeout = args.drain_timeout or 90 + 10 * args.minutes

    base = Path(tempfile.mkdtemp(prefix="sas-soak-"))
    stack = Stack(base=base, broker=args.broker)
    say(f"seed {args.seed}, {args.minutes:g} min, broker {args.broker}, logs in {base}")
    try:
        return soak(stack, args, seconds, drain_timeout)
    finally:
        stack.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(base, ignore_errors=True)


def soak(stack: Stack, args: argparse.Namespace, seconds: float, drain_timeout: float) -> int:
    stack.start_servers()
    if not stack.proxies:
        say(
            "chaos.faultproxy is not in the tree: the workers reach PostgreSQL and the broker"
            " directly, and the proxy faults are left out"
        )
    mark = time.monotonic()
    stack.prepare()
    setup = stack.setup_script(SETUP % {"order": repr(ORDER)})
    tokens, jobs = setup["tokens"], setup["jobs"]
    say(f"database migrated and seeded in {time.monotonic() - mark:.0f}s")
    mark = time.monotonic()
    stack.start_all()
    os.environ.update(stack.env)
    import django

    django.setup()
    say(
        f"stack up in {time.monotonic() - mark:.0f}s: {len(stack.procs)} processes,"
        f" web {stack.web_url}, simulator {stack.sim_url}"
    )

    capacity = calibrate(stack, tokens[0], args.calibration_orders)
    rate = min(args.max_rate, capacity / 2)
    say(f"capacity {capacity:.2f} orders/s without faults; load {rate:.2f} orders/s")

    load_out = stack.base / "load.jsonl"
    began_wall = time.time()
    load = subprocess.Popen(
        [
            sys.executable, "-m", "soak.load", "--web", stack.web_url, "--tokens", json.dumps(tokens),
            "--rate", f"{rate:.3f}", "--seconds", str(seconds), "--seed", str(args.seed),
            "--out", str(load_out),
        ],
        cwd=REPO_ROOT,
        env=stack.env,
    )  # fmt: skip
    monitor = Monitor(stack)
    monitor.start()
    injector = Injector(stack, random.Random(args.seed), say=say)
    plan = injector.schedule(max(1.0, seconds - 15))
    say(f"{len(plan)} faults planned: {', '.join(k for _, k, _ in plan)}")
    began = time.monotonic()
    faults_thread = threading.Thread(
        target=injector.run, args=(plan, began, began + seconds - 5), daemon=True
    )
    faults_thread.start()
    keeper = Keeper(stack, injector)
    keeper.start()
    load.wait()
    injector.stop.set()
    faults_thread.join(timeout=180)
    say("load over; restoring every process, clearing the faults, draining")
    SimulatorControl(stack.sim_url).clear_faults()
    for proxy in stack.proxies.values():
        proxy.set(latency_ms=0, jitter_ms=0, reset=False, blackhole=False)
    # The recurring jobs are paused here, over the API, once the dispatcher has caught up (no
    # occurrence due): each job's window, every occurrence of which must have a run or a skip
    # row, ends before its next fire time.
    caught_up = time.monotonic() + 90
    while time.monotonic() < caught_up:
        due = stack.query(
            "SELECT count(*) FROM scheduler_scheduledjob"
            " WHERE job_id = ANY(%s) AND next_execution_at <= now()",
            (jobs,),
        )[0][0]
        if not due:
            break
        time.sleep(1)
    window_end = dict(
        stack.query(
            "SELECT job_id, min(next_execution_at) FROM scheduler_scheduledjob WHERE job_id = ANY(%s)"
            " GROUP BY job_id",
            (jobs,),
        )
    )
    for job_id, token in zip(jobs, tokens, strict=True):
        status, answer = post(f"{stack.web_url}/api/jobs/{job_id}/pause/", token, {"note": "soak over"})
        if status != 200:
            say(f"could not pause job {job_id}: {status} {answer}")
    drain_began = time.monotonic()
    time.sleep(5)
    waiting: dict[str, int] = {}
    while time.monotonic() - drain_began < drain_timeout:
        waiting = drained(stack)
        if not waiting:
            break
        time.sleep(1)
    drain_took = time.monotonic() - drain_began
    say(f"drain {'done' if not waiting else 'timed out: ' + str(waiting)} in {drain_took:.0f}s")
    monitor.halt.set()
    keeper.halt.set()

    excess, longest = stuck_steps(monitor, injector.log + keeper.outages)
    facts = gather(stack, jobs, window_end, excess)
    results = check.check_all(facts, expand)
    planted, expected = check.plant_violations(facts)
    caught = {inv.name for inv in check.check_all(planted, expand) if not inv.ok}
    missed = expected - caught

    print("\n==== soak report ====")
    print(f"seed {args.seed}, {args.minutes:g} min, broker {args.broker}, load {rate:.2f} orders/s"
          f" (capacity {capacity:.2f}/s measured without faults), drain {drain_took:.0f}s")  # fmt: skip
    print("load held per minute:")
    print("\n".join(load_table(stack, load_out, began_wall)))
    print("faults by kind:")
    by_kind = collections.Counter(f.kind for f in injector.log)
    not_run = sorted(set(injector.kinds()) - set(by_kind))
    print("  " + ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items())))
    if not_run:
        print(f"  not reached in this soak's time: {', '.join(not_run)}")
    if not stack.proxies:
        print("  proxy faults (latency/resets to PostgreSQL and the broker): chaos.faultproxy missing")
    print("faults (start, kind, target, length, recovery = next successful attempt after it):")
    for fault in injector.log:
        took = recovery(stack, fault)
        print(
            f"  {datetime.fromtimestamp(fault.start, UTC):%H:%M:%S} {fault.kind:<18} {fault.target[:40]:<40}"
            f" {fault.end - fault.start:5.1f}s  recovery {'-' if took is None else f'{took:.1f}s'}"
            f"{'  FAILED: ' + fault.note if not fault.ok else ''}"
        )
    allowed = f"sweep {SWEEP_SECONDS:g}s + {GRACE_SECONDS:g}s + outages"
    print("processes that exited on their own (started again, as a process manager would):")
    for at, name, why in keeper.exits:
        print(f"  {datetime.fromtimestamp(at, UTC):%H:%M:%S} {name}: {why}")
    if not keeper.exits:
        print("  none")
    print(f"longest a step stayed Processing past its complete-by: {longest:.1f}s"
          f" ({monitor.samples} samples; allowed: {allowed})")  # fmt: skip
    print("invariants:")
    for inv in results:
        print(
            f"  {'ok  ' if inv.ok else 'FAIL'} {inv.name}: {inv.checked} checked,"
            f" {len(inv.violations)} violations"
        )
        for line in inv.violations[:10]:
            print(f"         {line}")
    print(
        f"checker self-test: planted {sorted(expected)};"
        f" {'all caught' if not missed else 'MISSED ' + str(missed)}"
    )
    failed_faults = [f for f in injector.log if not f.ok]
    ok = all(inv.ok for inv in results) and not missed and not waiting and not failed_faults
    print(f"RESULT: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1

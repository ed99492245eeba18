"""Dispatchers that scale out (issue 20), with real Celery worker processes on committed rows:
K = 2 and 3 dispatchers against 2,000 jobs due within a few seconds (every occurrence once,
each process fired a share); one of two killed with SIGKILL while it holds a shard mid-tick (its
shard waits for the lease to end, then the other fires it: nothing lost, nothing doubled); and
the tick at the due time (an occurrence due between two beat sends is written at its time, not
at the next send).

The test plays beat: it sends the dispatcher's tick to the workers' own queue every
`BEAT_EVERY` seconds (beat's own dispatcher row is disabled, `beat_dispatcher_off`). The
workers send their wake-ups and relays to that queue too (SAS_JOBS_DISPATCH_QUEUE). Solo pool:
the worker process is the one that dispatches, so its `host:pid` is the history rows' worker.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import current_app

from sastools.harness import wait_for
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.tick import PAUSE_MARKER
from scheduler.models import DispatcherShard, Job, Run, ScheduledJob, TaskExecutionHistory
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

from .test_jobs_live import beat_dispatcher_off, owner

__all__ = ["beat_dispatcher_off", "owner"]

SHARDS = 12
BEAT_EVERY = 1.0


def _burst(
    owner: Any, n: int, *, start_in: float, spread: float, seed: int = 20
) -> set[tuple[int, datetime]]:
    """`n` one-off jobs due at random instants in [now + start_in, now + start_in + spread]
    (database clock), written in bulk; returns their (job, occurrence) pairs."""
    now = job_transitions.db_now()
    rng = random.Random(seed)
    jobs = Job.objects.bulk_create(
        [
            Job(
                owner=owner,
                name=f"burst-{i}",
                workflow=ENGINE_WORKFLOW,
                input=ENGINE_INPUT,
                run_at=now + timedelta(seconds=start_in + rng.uniform(0, spread)),
            )
            for i in range(n)
        ]
    )
    rows = [
        ScheduledJob(job=job, scheduled_for=job.run_at or now, next_execution_at=job.run_at) for job in jobs
    ]
    ScheduledJob.objects.bulk_create(rows)
    return {(row.job_id, row.scheduled_for) for row in rows}


class Beat:
    """Sends a dispatcher tick to `queue` every BEAT_EVERY seconds until stopped."""

    def __init__(self, queue: str) -> None:
        self.queue, self.stop = queue, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            current_app.send_task("scheduler.jobs_dispatch", queue=self.queue, expires=5 * BEAT_EVERY)
            self.stop.wait(BEAT_EVERY)

    def __enter__(self) -> Beat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _dispatcher_env(queue: str, **more: str) -> dict[str, str]:
    return {
        "SAS_JOBS_DISPATCH_QUEUE": queue,
        "SAS_JOBS_DISPATCH_SHARDS": str(SHARDS),
        "SAS_JOBS_DISPATCH_INTERVAL": str(BEAT_EVERY),
        # Batches of 100: a tick of a few hundred rows spans several transactions, as a burst's does.
        "SAS_JOBS_DISPATCH_BATCH": "100",
        # One owner's 2,000 runs: the runs-in-flight quota (scheduler/limits.py) is not what is tested.
        "SAS_QUOTA_RUNS_IN_FLIGHT": "0",
        **more,
    }


def _fired(owner: Any) -> Counter[tuple[int, datetime | None]]:
    return Counter(Run.objects.filter(job__owner=owner).values_list("job_id", "scheduled_for"))


def _instance(proc: Any) -> str:
    return f"{socket.gethostname()}:{proc.pid}"


@pytest.fixture
def dispatchers(beat_dispatcher_off: None, start_worker: Any) -> Any:
    def start(k: int, queue: str, **env: str) -> list[Any]:
        return [
            start_worker(
                name=f"{queue}-{i}", queues=queue, concurrency=1, pool="solo", **_dispatcher_env(queue, **env)
            )
            for i in range(k)
        ]

    return start


@pytest.mark.parametrize("k", [2, 3])
def test_k_dispatchers__2000_jobs_due_within_seconds__each_occurrence_once_each_process_a_share(
    dispatchers, owner, k
):
    queue = f"jobs-scale-{k}"
    procs = dispatchers(k, queue)
    expected = _burst(owner, 2000, start_in=2.0, spread=3.0)

    with Beat(queue):
        wait_for(
            lambda: len(_fired(owner)) >= 2000, timeout=120, interval=0.5, what="every occurrence to fire"
        )
        time.sleep(2 * BEAT_EVERY)  # ticks after the last one fire nothing more

    fired = _fired(owner)
    assert set(fired) == expected  # none missing, none extra
    assert set(fired.values()) == {1}  # none twice
    started = Counter(
        TaskExecutionHistory.objects.filter(job__owner=owner, status="started").values_list(
            "worker", flat=True
        )
    )
    assert sum(started.values()) == 2000
    shares = {_instance(proc): started.get(_instance(proc), 0) for proc in procs}
    assert set(started) == set(shares), started  # only these processes dispatched
    assert all(n > 0 for n in shares.values()), shares  # each fired a share
    assert not ScheduledJob.objects.filter(job__owner=owner).exists()


def test_dispatcher_killed_mid_burst__its_shard_fired_by_another_after_the_lease__none_lost_or_doubled(
    dispatchers, owner
):
    lease = 4.0
    # The victim consumes its own queue and stops between its first claim and its commit.
    (victim,) = dispatchers(
        1,
        "jobs-victim",
        SAS_JOBS_TEST_PAUSE_AFTER_CLAIM="120",
        SAS_JOBS_DISPATCH_LEASE_SECONDS=str(lease),
    )
    (survivor,) = dispatchers(1, "jobs-survivor", SAS_JOBS_DISPATCH_LEASE_SECONDS=str(lease))
    expected = _burst(owner, 2000, start_in=1.0, spread=1.0)
    wait_for(
        lambda: job_transitions.db_now() > max(t for _, t in expected), timeout=30, what="every row to be due"
    )

    current_app.send_task("scheduler.jobs_dispatch", queue="jobs-victim")
    wait_for(lambda: PAUSE_MARKER in victim.log(), timeout=30, what="the victim to claim and pause")
    # The victim holds a group of shards (SAS_JOBS_DISPATCH_SHARDS_PER_CLAIM), leased together.
    held = list(DispatcherShard.objects.filter(holder=_instance(victim), leased_until__isnull=False))
    assert held and all(h.leased_until is not None for h in held)
    held_shards = {h.shard for h in held}
    held_until = max(h.leased_until for h in held if h.leased_until)
    assert len(held_shards) < SHARDS  # the survivor has shards of its own to fire meanwhile
    with Beat("jobs-survivor"):
        # The survivor fires every other shard while the victim holds its own, mid-tick.
        others = {(j, t) for j, t in expected if job_transitions.shard_of(j, SHARDS) not in held_shards}
        wait_for(lambda: set(_fired(owner)) >= others, timeout=120, interval=0.5, what="the other shards")
        victim.kill()  # SIGKILL, its transaction open: PostgreSQL rolls it back
        wait_for(lambda: len(_fired(owner)) >= 2000, timeout=120, interval=0.5, what="the victim's shard")
        time.sleep(2 * BEAT_EVERY)

    fired = _fired(owner)
    assert set(fired) == expected and set(fired.values()) == {1}
    # The victim's shard was fired by the survivor, and only once its lease had ended.
    mine = {j for j, _ in expected if job_transitions.shard_of(j, SHARDS) not in held_shards}
    late = TaskExecutionHistory.objects.filter(job__owner=owner, status="started").exclude(job_id__in=mine)
    assert late.exists()
    assert set(late.values_list("worker", flat=True)) == {_instance(survivor)}
    assert min(late.values_list("started_at", flat=True)) >= held_until
    assert not TaskExecutionHistory.objects.filter(job__owner=owner, worker=_instance(victim)).exists()


def test_tick_at_the_due_time__an_occurrence_between_two_beat_sends_is_written_at_its_time(
    dispatchers, owner
):
    # Beat would send every 30 s; the test sends once, and the occurrence is due 3 s later. No
    # other tick is ever sent, so only the dispatcher's wake-up for the due time can write it (it
    # is never written without one, whatever the machine's load). No timing is asserted (a
    # shared, noisy machine): the lag is printed, and measured over 20 occurrences by
    # `bench/jobs.py --only ontime` (bench/README.md, "On time").
    dispatchers(1, "jobs-ontime", SAS_JOBS_DISPATCH_INTERVAL="30")
    due = job_transitions.db_now() + timedelta(seconds=3)
    job = Job.objects.create(
        owner=owner, name="on-time", workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, run_at=due
    )
    ScheduledJob.objects.create(job=job, scheduled_for=due, next_execution_at=due)

    current_app.send_task("scheduler.jobs_dispatch", queue="jobs-ontime")  # beat's send
    started = wait_for(
        lambda: TaskExecutionHistory.objects.filter(job=job, status="started").first(),
        timeout=60,
        what="the occurrence to be written (by the wake-up: nothing else sends a tick)",
    )

    lag = (started.started_at - due).total_seconds()
    print(f"tick at the due time: run written {lag * 1000:.0f} ms after its due time")
    assert lag >= 0, f"written {-lag:.3f} s before its due time"
    run = Run.objects.get(job=job)
    assert run.scheduled_for == due and run.created_at == started.started_at

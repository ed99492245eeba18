"""A worker on another host, cut off (issue 22): an agent worker, and a jobs dispatcher, run in a
network namespace of their own (tests/chaos/network.py) and reach PostgreSQL, the Redis broker and
the simulator only through links the test cuts and heals. Real processes throughout; the
namespace, its veth pair and the proxies are removed even when a test fails.

1. The agent is inside a slow remote call when its links to PostgreSQL and the broker are cut (its
   link to the simulator stays): the call completes at the simulator and the agent replies - into
   the cut. Past the step's deadline the step is claimed again and run by a second agent worker
   outside; once the links heal, the cut-off agent's reply reaches the scheduler and is fenced
   (a late reply, ignored: its lease is not the step's). One reserve in the ledger for the key.
2. Only the link to the simulator is cut: the agent's call ends by itself at its deadline (the
   task returns while the link is still cut); after the heal the step completes, one effect.
3. A second jobs dispatcher, cut off mid-burst inside a batch's transaction: its shard is fired by
   the other dispatcher once its lease has ended, and every occurrence fires exactly once.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from celery import current_app
from django.utils import timezone

from sastools.harness import wait_for
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.tick import PAUSE_MARKER
from scheduler.models import DispatcherShard, Run, Step, TaskExecutionHistory

from ..e2e.helpers import step, submit_order, wait_run
from ..scheduler.test_dispatcher_scaleout_live import (
    SHARDS,
    Beat,
    _burst,
    _dispatcher_env,
    _fired,
    _instance,
    beat_dispatcher_off,
    dispatchers,
    owner,
)
from .network import RemoteHost, remote_host

__all__ = ["beat_dispatcher_off", "dispatchers", "owner"]


@pytest.fixture
def host(worker_env: dict[str, str], tmp_path: Path) -> Iterator[RemoteHost]:
    with remote_host(worker_env, tmp_path) as remote:
        yield remote


@pytest.fixture
def agents_outside_stopped(engine) -> Iterator[None]:
    """The session's agent worker is stopped for the test (the namespace's agent must take the
    first attempt) and started again after it."""
    engine.agents.stop()
    try:
        yield
    finally:
        engine.agents.start(ready_marker=" ready.")


def _reserves(engine, run_id) -> list[dict]:
    return [
        entry
        for entry in engine.sim.ledger(service="inventory", operation="reserve")
        if str(entry["key"]).startswith(f"{run_id}:")
    ]


def test_agent_cut_from_database_and_broker_inside_a_call__rerun_elsewhere_late_reply_fenced_one_effect(
    engine, agents_outside_stopped, host, demo_user, start_worker
):
    # The inventory answers after 1.5 s, inside the step's 3 s window (SAS_ORDER_STEP_TIMEOUT).
    engine.sim.set_faults("inventory", latency_ms=1500)
    cut_off = host.worker("cut-off-agent")
    order = submit_order(demo_user)
    first = step(order.run_id, "reserve_inventory")
    assert first.process_state == Step.State.PROCESSING

    # The request reached the simulator through the namespace's link: the agent is in its call.
    wait_for(lambda: host.proxies["simulator"].stats()["bytes_up"] > 0, timeout=20, what="the remote call")
    host.cut("postgres", "broker")
    wait_for(
        lambda: engine.sim.ledger(service="inventory", operation="reserve", key=first.idempotency_key),
        timeout=20,
        what="the cut-off agent's call to take effect at the simulator",
    )
    # Its reply is stuck in the cut; the deadline passes, the supervisor claims the step again.
    wait_for(lambda: timezone.now() > first.complete_by, timeout=20, what="complete-by to pass")
    start_worker(name="outside-agents")
    wait_for(
        lambda: Step.objects.filter(pk=first.pk).exclude(lease=first.lease).exists(),
        timeout=30,
        what="the step to be claimed again",
    )
    run = wait_run(order.run_id, (Run.State.COMPLETED,), timeout=60)
    assert cut_off.alive()

    host.heal()
    # Where the cut caught the agent decides what it sends: its reply's LPUSH written into the
    # cut's buffers reaches the broker after the heal and is fenced as a late reply; caught before
    # writing it (blocked on an earlier round trip to Redis or PostgreSQL), the agent's soft time
    # limit at the deadline ends the task with no reply at all (seen once in a full run under
    # load). Either way nothing it does counts; a reply that does arrive must be ignored.
    gave_up = f"step {first.pk}: soft time limit hit at the deadline; no reply"
    wait_for(
        lambda: (
            gave_up in cut_off.log()
            or TaskExecutionHistory.objects.filter(
                step=first.pk, kind=TaskExecutionHistory.Kind.LATE_REPLY
            ).exists()
        ),
        timeout=60,
        what="the cut-off agent's reply to arrive late, or its task to end at the deadline without one",
    )
    time.sleep(2.0)  # a reply written just before the soft limit is still on its way
    late = TaskExecutionHistory.objects.filter(
        step=first.pk, kind=TaskExecutionHistory.Kind.LATE_REPLY
    ).first()
    if late is not None:
        assert late.status == TaskExecutionHistory.Status.IGNORED
        assert late.detail["reply_lease"] == str(first.lease) and late.detail["outcome"] == "success"
    else:
        assert gave_up in cut_off.log()
    reserve = step(run.id, "reserve_inventory")
    assert reserve.attempts >= 2 and str(reserve.lease) != str(first.lease)
    # Two agents called with the same key, on two hosts: one effect.
    reserves = _reserves(engine, run.id)
    assert len(reserves) == 1 and reserves[0]["key"] == reserve.idempotency_key == first.idempotency_key


def test_agent_cut_from_the_simulator_only__its_call_ends_at_the_deadline__one_effect_after_heal(
    engine, agents_outside_stopped, host, demo_user
):
    agent = host.worker("sim-cut-agent")
    host.cut("simulator")
    order = submit_order(demo_user)
    first = step(order.run_id, "reserve_inventory")

    # The task ends by itself, the link still cut: its call was bounded by the step's deadline
    # (it gives up without a reply, or replies transient while time is left).
    ended = wait_for(
        lambda: re.search(
            r"agents\.inventory\.reserve\[[^]]+\] (?:succeeded in [\d.]+s: '(\w+)'"
            r"|raised expected: AttemptFailed\('(\w+)'\))",
            agent.log(),
        ),
        timeout=30,
        what="the cut-off call to end",
    )
    assert (ended.group(1) or ended.group(2)) in ("deadline", "transient", "deferred"), ended.group(0)
    bounded = re.search(r"step \d+ try 1: inventory timed out after ([\d.]+)s", agent.log())
    assert bounded, agent.log()[-2000:]
    print(f"simulator cut: the agent's call timed out after {bounded.group(1)} s (step window 3 s)")
    assert host.proxies["simulator"].stats()["faults"]["blackhole"] is True
    assert not engine.sim.ledger(service="inventory", operation="reserve", key=first.idempotency_key)

    host.heal()
    run = wait_run(order.run_id, (Run.State.COMPLETED,), timeout=60)
    reserve = step(run.id, "reserve_inventory")
    assert reserve.attempts >= 2
    # The request held in the cut may reach the simulator after the heal, the retry too: one effect.
    reserves = _reserves(engine, run.id)
    assert len(reserves) == 1 and reserves[0]["key"] == reserve.idempotency_key


def test_dispatcher_cut_off_mid_burst__its_shard_taken_over_after_the_lease__each_occurrence_once(
    beat_dispatcher_off, owner, dispatchers, host
):
    lease = 4.0
    # The cut-off dispatcher's session, idle in its open transaction behind the cut, is ended by
    # PostgreSQL (settings.DATABASE_IDLE_IN_TRANSACTION_TIMEOUT): without it, it would hold its
    # shard's row lock for as long as PostgreSQL believes the peer alive (the proxy keeps it so,
    # as a pooler would; TCP keepalive takes two hours) and nobody would ever take the shard.
    victim = host.worker(
        "jobs-victim",
        queues="jobs-victim",
        pool="solo",
        **_dispatcher_env(
            "jobs-victim",
            SAS_JOBS_TEST_PAUSE_AFTER_CLAIM="3",
            SAS_JOBS_DISPATCH_LEASE_SECONDS=str(lease),
            DATABASE_IDLE_IN_TRANSACTION_TIMEOUT="2",
        ),
    )
    (survivor,) = dispatchers(1, "jobs-survivor", SAS_JOBS_DISPATCH_LEASE_SECONDS=str(lease))
    expected = _burst(owner, 300, start_in=1.0, spread=1.0)
    wait_for(
        lambda: job_transitions.db_now() > max(t for _, t in expected), timeout=30, what="every row to be due"
    )

    current_app.send_task("scheduler.jobs_dispatch", queue="jobs-victim")
    wait_for(lambda: PAUSE_MARKER in victim.log(), timeout=30, what="the victim to claim, mid-transaction")
    host.cut("postgres", "broker")
    # The victim holds a group of shards (SAS_JOBS_DISPATCH_SHARDS_PER_CLAIM), leased together.
    held = list(DispatcherShard.objects.filter(holder=_instance(victim), leased_until__isnull=False))
    assert held
    held_shards = {h.shard for h in held}
    held_until = max(h.leased_until for h in held if h.leased_until)
    with Beat("jobs-survivor"):
        wait_for(
            lambda: len(_fired(owner)) >= len(expected), timeout=90, interval=0.5, what="every occurrence"
        )
        time.sleep(1.0)
    assert victim.alive()  # cut off, not dead
    host.heal()
    time.sleep(1.0)  # the victim's batch, woken into a session that PostgreSQL ended, fires nothing

    fired = _fired(owner)
    assert set(fired) == expected and set(fired.values()) == {1}
    theirs = {j for j, _ in expected if job_transitions.shard_of(j, SHARDS) in held_shards}
    assert theirs
    late = TaskExecutionHistory.objects.filter(job__owner=owner, status="started", job_id__in=theirs)
    assert set(late.values_list("worker", flat=True)) == {_instance(survivor)}
    assert min(late.values_list("started_at", flat=True)) >= held_until
    assert not TaskExecutionHistory.objects.filter(job__owner=owner, worker=_instance(victim)).exists()

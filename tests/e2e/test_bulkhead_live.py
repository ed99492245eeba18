"""Bulkheads (issue 7): a remote service that hangs holds at most its own share of agent
capacity. The agent workers are the Procfile's (a worker per service queue, as `make run`
starts them); shipping hangs for 60 s under a stream of orders."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from sastools.harness import Proc, procfile_commands, procfile_process, wait_for
from scheduler.models import Run, Step, TaskExecutionHistory

from ..conftest import Engine
from .helpers import submit_order

HANG_SECONDS = 60
ORDERS_PER_SECOND = 1


@pytest.fixture
def procfile_agents(engine: Engine, tmp_path: Path) -> Iterator[list[Proc]]:
    """The Procfile's agent workers instead of the session's single agents worker (which serves
    every agent queue, the layout under test before issue 7); the session's is back afterwards."""
    names = [name for name in procfile_commands() if name.startswith("agents")]
    queues = sorted(name.removeprefix("agents-") for name in names)
    assert queues == ["apps", "http", "inventory", "payment", "shipping", "tasks", "webhook"], names
    # The job targets' workers (http, tasks) and the workflow apps' (apps, issue 31) have no part
    # in an order's flow: not started.
    names = [name for name in names if name.removeprefix("agents-") not in ("apps", "http", "tasks")]
    # The breaker stays out of the way: once open, its fast-fails free the slots a hung call
    # would hold and hide a missing bulkhead (a service slow enough to time out only sometimes
    # never opens it). With it, a single shared agents worker passes this test.
    env = {**engine.env, "SAS_BREAKER_FAILURE_THRESHOLD": "100000"}
    engine.agents.stop()
    procs: list[Proc] = []
    try:
        # Started together, then waited for together: four workers booting one after another
        # cost seconds of the suite.
        for name in names:
            procs.append(procfile_process(name, log_dir=tmp_path, env=env).start(ready_marker=None))
        for proc in procs:

            def ready(proc: Proc = proc) -> bool:
                return " ready." in proc.log() or not proc.alive()

            wait_for(ready, timeout=40, what=f"{proc.name} to be ready")
            assert proc.alive(), proc.log()[-3000:]
        yield procs
    finally:
        for proc in procs:
            proc.stop()
        engine.agents.start(ready_marker=" ready.")


def test_bulkhead__shipping_hangs_60s__inventory_and_payment_keep_their_deadlines__shipments_follow(
    engine: Engine, procfile_agents: list[Proc], demo_user
):
    engine.sim.set_faults("shipping", hang=True)
    hang_started = time.monotonic()
    runs = []
    # A stream of orders for the first 50 s of the hang; the last ones' shipments are still
    # hanging when it clears.
    while time.monotonic() - hang_started < HANG_SECONDS - 10:
        order = submit_order(demo_user)
        runs.append(order.run_id)
        # Shipping's window is longer than the others' (10 s against 3 s), as a slower service's
        # would be: a call hung in it holds its slot for 10 s, past the whole window of an
        # inventory or payment step queued behind it in a shared worker. Its failure budget
        # outlasts the hang (each attempt into it times out and counts): this test is about the
        # other services, which keep theirs.
        Step.objects.filter(run_id=order.run_id, name="create_shipment").update(
            max_failures=1000, timeout=timedelta(seconds=10)
        )
        time.sleep(1 / ORDERS_PER_SECOND)

    # While shipping still hangs: every order's first two steps are done, none timed out.
    wait_for(
        lambda: (
            Step.objects.filter(
                run_id__in=runs, name__in=["reserve_inventory", "charge_payment"], process_state="processed"
            ).count()
            == 2 * len(runs)
        ),
        timeout=15,
        interval=0.2,
        what="every order's inventory and payment steps processed while shipping hangs",
    )
    assert time.monotonic() - hang_started < HANG_SECONDS, "the hang ended before the check"
    assert engine.sim.faults()["shipping"]["hang"] is True
    shipping_timeouts = TaskExecutionHistory.objects.filter(
        step__name="create_shipment", status=TaskExecutionHistory.Status.TIMED_OUT
    ).count()
    assert shipping_timeouts > 0, "shipping never hung: the test proves nothing"

    time.sleep(max(0.0, HANG_SECONDS - (time.monotonic() - hang_started)))
    engine.sim.set_faults("shipping", hang=False)

    def finished() -> bool:
        return Run.objects.filter(pk__in=runs, state__in=Run.TERMINAL_STATES).count() == len(runs)

    wait_for(finished, timeout=60, interval=0.5, what="every order to finish after the hang")
    assert set(Run.objects.filter(pk__in=runs).values_list("state", flat=True)) == {Run.State.COMPLETED}

    # No inventory or payment attempt expired or failed, and each took one try well inside its
    # window (the first two steps finished on time).
    early = Step.objects.filter(run_id__in=runs, name__in=["reserve_inventory", "charge_payment"])
    assert not TaskExecutionHistory.objects.filter(
        step__in=early,
        status__in=[TaskExecutionHistory.Status.TIMED_OUT, TaskExecutionHistory.Status.FAILED_TRANSIENT],
    ).exists()
    assert set(early.values_list("failure_count", flat=True)) == {0}
    for step in early:
        (attempt,) = TaskExecutionHistory.objects.filter(step=step, kind=TaskExecutionHistory.Kind.ATTEMPT)
        assert attempt.status == TaskExecutionHistory.Status.SUCCEEDED, (step.name, attempt.status)
        assert attempt.ended_at is not None and attempt.ended_at - attempt.started_at <= step.timeout
    # One effect per order and service, however often shipping was tried.
    assert len(engine.sim.ledger(service="inventory", operation="reserve")) == len(runs)
    assert len(engine.sim.ledger(service="payment", operation="charge")) == len(runs)
    assert len(engine.sim.ledger(service="shipping", operation="create")) == len(runs)
    # A bulkhead worker serves one service's queue, never the next step's: a run's next step
    # always went through the broker. What one ran in place (agents/eager.py) can only be a
    # step of its own service - the "one more" claim of a reply, of the same operation.
    for proc in procfile_agents:
        service = proc.name.removeprefix("agents-")
        in_place = re.findall(r"\(agents\.([a-z_]+)\.[a-z_]+\): ran in place", proc.log())
        assert set(in_place) <= {service}, (proc.name, sorted(set(in_place)))

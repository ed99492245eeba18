"""A reply that reaches the scheduler after its step's deadline, on real workers.

The agent replies through the scheduler queue (`SAS_REPLY_MODE=queue`) in time, but the
scheduler process is frozen (SIGSTOP) until after complete-by: the reply sits in the broker.
Meanwhile the step has expired; when the scheduler wakes it reads the stale reply, records it as
ignored, and the step is retried under a new lease - the remote effect still happens once.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.utils import timezone

from sastools.harness import wait_for
from scheduler.models import Run, Step, TaskExecutionHistory

from .helpers import step, submit_order, wait_run


@pytest.mark.both_brokers
def test_reply__delayed_past_deadline_in_reply_queue__ignored_and_step_retried(
    engine, demo_user, start_worker
):
    engine.agents.stop()  # the session's agents reply inline; this test needs queued replies
    os.killpg(engine.control.pid, signal.SIGSTOP)
    try:
        start_worker(name="queue-reply-agents", SAS_REPLY_MODE="queue")
        order = submit_order(demo_user)  # claims reserve_inventory in the submit transaction
        first = step(order.run_id, "reserve_inventory")
        assert first.process_state == Step.State.PROCESSING
        wait_for(
            lambda: engine.sim.ledger(service="inventory", operation="reserve", key=first.idempotency_key),
            timeout=10,
            what="the agent to reserve at the inventory service",
        )
        # The agent replied (to the queue) well before complete-by; let complete-by pass.
        wait_for(lambda: timezone.now() > first.complete_by, timeout=10, what="complete-by to pass")
        time.sleep(0.3)
    finally:
        os.killpg(engine.control.pid, signal.SIGCONT)

    try:
        run = wait_run(order.run_id, (Run.State.COMPLETED,), timeout=40)
    finally:
        engine.agents.start(ready_marker=" ready.")

    reserve = step(run.id, "reserve_inventory")
    assert reserve.attempts == 2 and reserve.failure_count == 1
    assert str(reserve.lease) != str(first.lease)
    ignored = TaskExecutionHistory.objects.get(step=reserve, kind=TaskExecutionHistory.Kind.LATE_REPLY)
    assert ignored.status == TaskExecutionHistory.Status.IGNORED
    assert ignored.detail["reply_lease"] == str(first.lease) and ignored.detail["outcome"] == "success"
    attempts = TaskExecutionHistory.objects.filter(step=reserve, kind="attempt").order_by("id")
    assert [a.status for a in attempts] == ["timed_out", "succeeded"]
    # Two attempts, one effect: the retry carried the same idempotency key. (Only this run's
    # reserves count: the agents started here may also take messages an earlier test of this
    # process left queued - seen once in CI as 4 reserves, 3 of them other runs'.)
    reserves = engine.sim.ledger(service="inventory", operation="reserve")
    ours = [r for r in reserves if str(r["key"]).startswith(f"{run.id}:")]
    assert len(ours) == 1 and ours[0]["key"] == reserve.idempotency_key

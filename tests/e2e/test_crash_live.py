"""Crashes: a worker killed with SIGKILL in the middle of a remote call."""

from __future__ import annotations

import re
import signal
import time

import pytest

from sastools.harness import wait_for
from scheduler.models import Run, Step, TaskExecutionHistory

from .helpers import step, submit_order, wait_run, wait_step_state


@pytest.mark.both_brokers
def test_agent_worker_killed_mid_charge__order_completes_with_exactly_one_payment(engine, demo_user):
    # The charge takes 1.5 s at the payment service, so the kill lands while the agent waits on it.
    engine.sim.set_faults("payment", latency_ms=1500)
    order = submit_order(demo_user)
    charging = wait_step_state(order.run_id, "charge_payment", Step.State.PROCESSING)
    wait_for(
        lambda: _charge_started(engine.agents.log(), charging.pk),
        timeout=10,
        what="the agent to start the charge",
    )
    time.sleep(0.3)

    engine.agents.kill(signal.SIGKILL)  # parent and pool children, no goodbye
    engine.sim.set_faults("payment", latency_ms=0)
    engine.agents.start(ready_marker=" ready.")

    run = wait_run(order.run_id, (Run.State.COMPLETED,), timeout=40)

    charge = step(run.id, "charge_payment")
    assert charging.lease != charge.lease
    # The remote side effect happened once, however often the step ran.
    charges = engine.sim.ledger(service="payment", operation="charge")
    assert len(charges) == 1 and charges[0]["key"] == charge.idempotency_key
    history = TaskExecutionHistory.objects.filter(step=charge).order_by("id")
    statuses = [h.status for h in history if h.kind == "attempt"]
    # One attempt timed out (the killed one: one failure counted), one succeeded. While the
    # restarted worker boots (seconds on a loaded machine), the supervisor may send the step
    # again each time its start-by passes unstarted: those are "requeued", no failure counted.
    requeued = statuses.count("requeued")
    assert [s for s in statuses if s != "requeued"] == ["timed_out", "succeeded"], statuses
    assert charge.failure_count == 1 and charge.attempts == 2 + requeued


def _charge_started(log: str, step_id: int) -> bool:
    # The session's agents worker serves every agent queue, so the charge usually runs in place
    # right after the reservation (agents/eager.py); through the broker, its task is received.
    return f"step {step_id} (agents.payment.charge): ran in place" in log or bool(
        re.search(r"Task agents\.payment\.charge\[[^\]]+\] received", log)
    )

"""The scheduler process (the control worker: scheduler and supervisor queues) killed with
SIGKILL while a burst of orders is being claimed and dispatched. Nothing is lost: whatever it
had claimed, dispatched or not, is in the state store, and the restarted scheduler, the tick and
the supervisor carry every run to Completed with each remote effect applied once."""

from __future__ import annotations

import signal
import time

from django.db.models import Count

from sastools.harness import wait_for
from scheduler.models import Run, Step

from .helpers import submit_order

ORDERS = 20


def test_scheduler_killed_twice_during_a_burst__every_run_completes_effects_once(engine, demo_user, settings):
    # Every run's first claim goes through the scheduler process (no claim inside the submit),
    # so the kills land in the middle of the scheduler's own work.
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": False}
    engine.sim.set_faults("payment", latency_ms=200)
    orders = []
    unfinished_at_kill = []
    for i in range(ORDERS):
        orders.append(submit_order(demo_user, amount=f"{10 + i}.00"))
        if i in (5, 14):
            time.sleep(0.3)
            unfinished_at_kill.append(Run.objects.exclude(state__in=Run.TERMINAL_STATES).count())
            engine.control.kill(signal.SIGKILL)
            engine.control.start(ready_marker=" ready.")

    def all_done() -> bool:
        return Run.objects.filter(state__in=Run.TERMINAL_STATES).count() == ORDERS

    try:
        wait_for(all_done, timeout=90, interval=0.2, what=f"all {ORDERS} runs to finish")
    except AssertionError:
        stuck = [
            (run.state, list(run.steps.values_list("name", "process_state", "failure_count", "attempts")))
            for run in Run.objects.exclude(state__in=Run.TERMINAL_STATES)
        ]
        raise AssertionError(
            f"unfinished runs: {stuck}\nagents log tail:\n{engine.agents.log()[-3000:]}"
        ) from None

    assert min(unfinished_at_kill) > 0  # each kill hit a scheduler with work in hand
    assert set(Run.objects.values_list("state", flat=True)) == {Run.State.COMPLETED}
    assert not Step.objects.filter(process_state=Step.State.PROCESSING).exists()
    for service, operation in (("inventory", "reserve"), ("payment", "charge"), ("shipping", "create")):
        per_key: dict[str, int] = {}
        for entry in engine.sim.ledger(service=service, operation=operation):
            per_key[entry["key"]] = per_key.get(entry["key"], 0) + 1
        assert len(per_key) == ORDERS and set(per_key.values()) == {1}, (service, per_key)
    # Each step processed exactly once per run (no duplicate step rows, no double processing).
    counts = Step.objects.values("run_id").annotate(n=Count("id")).values_list("n", flat=True)
    assert set(counts) == {3}

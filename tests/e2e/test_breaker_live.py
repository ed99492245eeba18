"""The circuit breaker, shared by all worker processes through Redis, against a service that goes down."""

from __future__ import annotations

from agents.breaker import CircuitBreaker
from sastools.harness import wait_for
from scheduler.models import Run, TaskExecutionHistory

from .helpers import submit_order, wait_run


def test_breaker__service_down__opens_and_fails_fast__closes_after_recovery(engine, demo_user):
    breaker = CircuitBreaker("payment")
    engine.sim.set_faults("payment", down=True)

    failing = submit_order(demo_user)
    wait_for(lambda: breaker.snapshot()["state"] == "open", timeout=20, what="payment breaker to open")
    calls_when_open = _payment_calls(engine)

    # While open, agents fail fast: the step's attempts end with "circuit open" and the service
    # sees no new calls until the reset timeout lets one probe through.
    wait_for(
        lambda: TaskExecutionHistory.objects.filter(
            run_id=failing.run_id, error__contains="circuit open"
        ).exists(),
        timeout=20,
        what="an attempt refused by the open breaker",
    )
    assert _payment_calls(engine) - calls_when_open <= 1  # at most the half-open probe

    # A refused attempt never reached the service: deferred to the next probe, not counted. So
    # the order waits the outage out instead of running out of attempts.
    wait_for(
        lambda: TaskExecutionHistory.objects.filter(
            run_id=failing.run_id, kind="attempt", status=TaskExecutionHistory.Status.DEFERRED
        ).exists(),
        timeout=20,
        what="an attempt deferred by the open breaker",
    )
    charge = Run.objects.get(pk=failing.run_id).steps.get(name="charge_payment")
    assert charge.failure_count < charge.max_failures
    engine.sim.set_faults("payment", down=False)
    run = wait_run(failing.run_id, (Run.State.COMPLETED,), timeout=40)
    assert run.steps.get(name="charge_payment").process_state == "processed"

    recovered = submit_order(demo_user)
    wait_run(recovered.run_id, (Run.State.COMPLETED,), timeout=40)
    snapshot = breaker.snapshot()
    assert snapshot["state"] == "closed"
    assert int(snapshot["opened"]) >= 1
    assert len(engine.sim.ledger(service="payment", operation="charge")) == 2  # one per order


def _payment_calls(engine) -> int:
    stats = engine.sim.stats()["services"].get("payment", {}).get("charge", {})
    return sum(stats.values())

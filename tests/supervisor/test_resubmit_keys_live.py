"""Fix, then resubmit - and it fixes (issue 28, item 1), with real workers and the simulator.

The simulator stores the first answer it gave for an idempotency key, refusals included, and
replays it for that key, as real payment providers do. So after a definitive refusal (the remote
said no: nothing happened) the operator's resubmit must send under a new key generation, or the
cause fixed changes nothing; after an ambiguous outcome (a timeout: something may have happened)
it must keep the key, so the remote deduplicates it. Every action goes through the audited
operator service, as the admin calls it (ops/run_services.py).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.utils import timezone

from ops import bulk, run_services
from ops.audit import OperatorRefused
from ops.models import OperatorAction
from sastools.harness import wait_for
from scheduler.models import Run, Step, TaskExecutionHistory

from ..e2e.helpers import step, submit_order, wait_run, wait_step_state

RENEWED_NOTE = (
    "resubmitted under a new idempotency key (generation 2): the remote refused the last one, "
    "so nothing had happened"
)


@pytest.fixture
def ops_user(live_db: None) -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="ops-28", defaults={"is_staff": True})
    return user


def _failed_refund(engine: Any, demo_user: Any) -> tuple[Run, Step]:
    """An order whose shipment is refused and whose refund is then refused for good (402): the
    run ends Failed, the refund in Error. The shipment's agent is held by `hang` until the charge
    has been made, so the payment fault meets the refund only."""
    engine.sim.set_faults("shipping", hang=True)
    order = submit_order(demo_user)
    wait_step_state(order.run_id, "create_shipment", Step.State.PROCESSING)
    engine.sim.set_faults("payment", permanent_rate=1.0)
    engine.sim.set_faults("shipping", hang=False, permanent_rate=1.0)
    run = wait_run(order.run_id, (Run.State.FAILED,), timeout=60)
    refund = step(run.id, "refund_payment")
    assert (refund.process_state, refund.error_permanent) == ("error", True)
    assert "402" in refund.last_error
    assert len(engine.sim.ledger(service="payment", operation="charge")) == 1
    assert engine.sim.ledger(service="payment", operation="refund") == []
    return run, refund


def _resubmit_refund(run: Run, refund: Step, user: Any) -> OperatorAction:
    return run_services.step_resubmit_by_operator(
        step_id=refund.pk, user=user, reason="payment provider fixed the account", seen=refund.updated_at
    )


def _resume_run(run: Run, refund: Step, user: Any) -> OperatorAction:
    return run_services.run_resume_compensation_by_operator(
        run_id=run.pk, user=user, reason="payment provider fixed the account", seen=run.updated_at
    )


@pytest.mark.parametrize("act", [_resubmit_refund, _resume_run], ids=["resubmit_step", "resume_compensation"])
def test_refund_refused_for_good__cause_fixed__operator_resubmit_compensates_once_under_generation_2(
    engine: Any, demo_user: Any, ops_user: Any, act: Callable[[Run, Step, Any], OperatorAction]
) -> None:
    run, refund = _failed_refund(engine, demo_user)
    first_key = refund.idempotency_key
    engine.sim.set_faults("payment", permanent_rate=0.0)  # the cause fixed
    # The remote keeps the refusal under the old key: asked again with it, it answers the same.
    charge_key = step(run.id, "charge_payment").idempotency_key
    replay = httpx.post(
        os.environ["SIMULATOR_URL"] + "/payment/refund",
        json={"charge_key": charge_key},
        headers={"Idempotency-Key": first_key},
        timeout=10,
    )
    assert (replay.status_code, replay.json()) == (402, {"error": "card_declined"})

    act(run, refund, ops_user)
    done = wait_run(run.id, (Run.State.COMPENSATED, Run.State.FAILED), timeout=60)

    assert done.state == Run.State.COMPENSATED, done.error
    refunds = engine.sim.ledger(service="payment", operation="refund")
    assert [e["key"] for e in refunds] == [f"{first_key}:g2"]  # exactly one refund, the new key's
    refund.refresh_from_db()
    assert (refund.process_state, refund.key_generation, refund.idempotency_key) == (
        "processed",
        2,
        f"{first_key}:g2",
    )
    history = TaskExecutionHistory.objects.get(step=refund, kind=TaskExecutionHistory.Kind.OPERATOR)
    assert history.detail["key_generation"] == 2 and history.detail["note"] == RENEWED_NOTE
    assert [e["key"] for e in engine.sim.ledger(service="payment", operation="charge")] == [charge_key]


@contextmanager
def _scheduler_stopped(engine: Any) -> Iterator[None]:
    """The control worker (the scheduler's kicks, the supervisor) and beat stopped: the agents
    go on, and a reply still claims its run's next step, but a compensation made Pending waits."""
    for proc in (engine.control, engine.beat):
        proc.kill(signal.SIGSTOP)
    try:
        yield
    finally:
        for proc in (engine.control, engine.beat):
            proc.kill(signal.SIGCONT)


def test_charge_refused_for_good__cause_fixed__forward_resubmit_in_place_completes_with_one_charge(
    engine: Any, demo_user: Any, ops_user: Any
) -> None:
    engine.sim.set_faults("payment", permanent_rate=1.0)  # the provider declines every charge
    with _scheduler_stopped(engine):
        order = submit_order(demo_user)
        charge = wait_step_state(order.run_id, "charge_payment", Step.State.ERROR, timeout=30)
        release = step(order.run_id, "release_inventory")
        assert (release.process_state, release.attempts) == ("pending", 0)  # nothing undone yet
        assert charge.error_permanent and "402" in charge.last_error
        first_key = charge.idempotency_key
        engine.sim.set_faults("payment", permanent_rate=0.0)  # the cause fixed

        run_services.step_resubmit_by_operator(
            step_id=charge.pk, user=ops_user, reason="provider fixed the declines", seen=charge.updated_at
        )

    done = wait_run(order.run_id, (Run.State.COMPLETED, Run.State.COMPENSATED), timeout=60)
    assert done.state == Run.State.COMPLETED, done.error
    charges = engine.sim.ledger(service="payment", operation="charge")
    assert [e["key"] for e in charges] == [f"{first_key}:g2"]
    assert engine.sim.ledger(service="payment", operation="refund") == []
    charge.refresh_from_db()
    assert (charge.key_generation, charge.idempotency_key) == (2, f"{first_key}:g2")
    history = TaskExecutionHistory.objects.get(step=charge, kind=TaskExecutionHistory.Kind.OPERATOR)
    assert history.detail["note"] == RENEWED_NOTE


def test_refund_timed_out__operator_retries_now__same_key__the_remote_dedupes_one_refund(
    engine: Any, demo_user: Any, ops_user: Any
) -> None:
    """A refund whose call outlives the agent's window (latency above the 3 s step timeout): the
    refund happens at the remote, the engine never hears of it - ambiguous. The operator's retry
    keeps the key, and the remote answers from its record: one refund."""
    engine.sim.set_faults("shipping", hang=True)
    order = submit_order(demo_user)
    wait_step_state(order.run_id, "create_shipment", Step.State.PROCESSING)
    engine.sim.set_faults("payment", latency_ms=4500)
    engine.sim.set_faults("shipping", hang=False, permanent_rate=1.0)
    wait_for(
        lambda: engine.sim.ledger(service="payment", operation="refund"),
        timeout=60,
        what="the refund applied",
    )
    refund = wait_for(
        lambda: Step.objects.filter(run_id=order.run_id, name="refund_payment", failure_count__gte=1).first(),
        timeout=60,
        what="the refund's failure counted",
    )
    first_key = refund.idempotency_key
    engine.sim.set_faults("payment", latency_ms=0)

    def retry_now() -> OperatorAction | None:
        row = Step.objects.get(pk=refund.pk)
        if row.process_state != Step.State.PENDING or row.failure_count == 0:
            return None
        try:
            return run_services.step_compensation_retry_by_operator(
                step_id=row.pk, user=ops_user, reason="payment latency fixed", seen=row.updated_at
            )
        except OperatorRefused:
            return None  # claimed meanwhile: its next backoff

    entry = wait_for(retry_now, timeout=60, what="the refund waiting out its backoff, retried now")
    done = wait_run(order.run_id, (Run.State.COMPENSATED, Run.State.FAILED), timeout=60)

    assert done.state == Run.State.COMPENSATED, done.error
    assert [e["key"] for e in engine.sim.ledger(service="payment", operation="refund")] == [first_key]
    history = TaskExecutionHistory.objects.get(step=refund, kind=TaskExecutionHistory.Kind.OPERATOR)
    assert history.detail.get("note", "").startswith(
        "resubmitted with the same idempotency key (generation 1)"
    )
    assert entry.detail == {"key_renewed": False, "key_generation": 1, "idempotency_key": first_key}
    refund.refresh_from_db()
    assert (refund.key_generation, refund.idempotency_key) == (1, first_key)


def test_bulk_dry_run__declined_card_marked_would_be_refused_again__left_out_unless_picked(
    engine: Any, demo_user: Any, ops_user: Any
) -> None:
    declined = submit_order(demo_user, card="tok_decline")  # the cause is in the input
    wait_run(declined.run_id, (Run.State.COMPENSATED,))
    engine.sim.set_faults("shipping", permanent_rate=1.0)  # the cause is the service's
    rejected = submit_order(demo_user)
    wait_run(rejected.run_id, (Run.State.COMPENSATED,))
    engine.sim.set_faults("shipping", permanent_rate=0.0)
    now = timezone.now()
    since, until = now - timedelta(hours=1), now + timedelta(minutes=5)

    plan = {i.run_id: i for i in bulk.bulk_resubmit_plan(reason="refused (4", since=since, until=until)}

    card, shipping = plan[str(declined.run_id)], plan[str(rejected.run_id)]
    assert card.plan == "skip" and "refused again" in card.why  # a declined card stays declined
    assert card.repeats == "card_declined"
    assert (shipping.plan, shipping.repeats) == ("resubmit_run", "")
    picked = {
        i.run_id: i
        for i in bulk.bulk_resubmit_plan(reason="refused (4", since=since, until=until, include_repeats=True)
    }
    assert picked[str(declined.run_id)].plan == "resubmit_run"
    assert picked[str(declined.run_id)].repeats == "card_declined"

    outcomes = bulk.bulk_resubmit(
        tokens=[i.token for i in plan.values() if i.plan != "skip"],
        user=ops_user,
        reason="shipping fixed",
        match="refused (4",
    )

    assert [o.done for o in outcomes] == [True]
    new = wait_run(outcomes[0].new_run_id, (Run.State.COMPLETED,), timeout=60)
    assert new.input == Run.objects.get(pk=rejected.run_id).input
    assert not OperatorAction.objects.filter(run_id=declined.run_id).exists()
    assert engine.sim.ledger(service="payment", operation="charge")[-1]["key"].startswith(str(new.pk))

"""AgentTask.perform on the real simulator and database, called in-process (no broker needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agents.operations import remote_operation
from agents.remote import close_http_client
from scheduler.models import Step
from scheduler.services import run_submit, step_claim_due
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

# An agent operation of the test's own (the agent base knows no domain): a charge at the simulator.
payment_charge = remote_operation(
    name="agents.payment.test_charge", service="payment", path="/payment/charge"
)


@pytest.fixture(autouse=True)
def _close_client():
    yield
    close_http_client()


@pytest.fixture
def claimed_charge(engine, demo_user):
    """A run of the engine's own test workflow whose first step is claimed by the test (the
    engine's workers never see it), its payload a charge for the payment service."""
    register_engine_workflow()
    run = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=demo_user.id, kick=False)
    Step.objects.filter(run=run, seq=0).update(
        payload={"amount": "3.00", "currency": "EUR", "card": "tok_ok"}, operation=payment_charge.name
    )
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


def perform(claim, complete_by=None):
    """The claim's request; a `complete_by` is stored in the step first (the agent reads its
    deadline from the step, not from the message: issue 26)."""
    if complete_by is not None:
        Step.objects.filter(pk=claim.step_id).update(complete_by=complete_by)
    return payment_charge.perform(path="/payment/charge", **claim.message())


def test_agent__request_already_expired__dropped_unread(engine, claimed_charge):
    outcome = perform(claimed_charge, complete_by=timezone.now() - timedelta(seconds=1))

    assert outcome == "dropped"
    assert engine.sim.stats()["total"] == 0


def test_agent__hung_service__stops_at_deadline_without_reply(engine, claimed_charge):
    engine.sim.set_faults("payment", hang=True)
    started = timezone.now()

    outcome = perform(claimed_charge, complete_by=started + timedelta(seconds=1))

    assert outcome == "deadline"
    assert timezone.now() - started < timedelta(seconds=2)
    assert Step.objects.get(pk=claimed_charge.step_id).process_state == "processing"


def test_agent__declined__permanent_reply_accepted(engine, claimed_charge):
    Step.objects.filter(pk=claimed_charge.step_id).update(
        payload={"amount": "3.00", "currency": "EUR", "card": "tok_decline"}
    )

    outcome = perform(claimed_charge)

    assert outcome == "accepted"
    step = Step.objects.get(pk=claimed_charge.step_id)
    assert step.process_state == "error" and step.error_permanent and "card_declined" in step.last_error


def test_agent__read_after_its_start_by__dropped_unread(engine, claimed_charge):
    Step.objects.filter(pk=claimed_charge.step_id).update(start_by=timezone.now() - timedelta(seconds=1))

    assert perform(claimed_charge) == "dropped"
    assert engine.sim.stats()["total"] == 0


def test_agent__connection_refused__deferred_without_a_failure(engine, claimed_charge, settings):
    settings.SAS = {
        **settings.SAS,
        "REMOTE_URLS": {**settings.SAS["REMOTE_URLS"], "payment": "http://127.0.0.1:9"},
    }

    outcome = perform(claimed_charge)

    assert outcome == "accepted"
    step = Step.objects.get(pk=claimed_charge.step_id)
    assert step.process_state == "pending" and step.failure_count == 0 and not step.reached
    assert step.history.get(kind="attempt").status == "deferred"


def test_agent__start__marked_for_the_supervisor(engine, claimed_charge):
    from scheduler.attempts import attempts_started

    assert attempts_started(leases=[claimed_charge.lease]) == set()
    assert perform(claimed_charge) == "accepted"
    assert attempts_started(leases=[claimed_charge.lease]) == {claimed_charge.lease}


def test_agent__step_run_in_place__held_as_its_claim_returned_it__no_lookup(
    engine, claimed_charge, django_assert_num_queries
):
    """A step this process claimed and runs in place (agents/eager.py) is held as the claim's own
    statement returned it: no second read of its row (bench/agent_check.py). Only that step,
    under that lease, for that operation: any other request is looked up as before."""
    from agents import eager

    message = {"path": "/payment/charge", **claimed_charge.message()}
    token = eager._in_place.set(claimed_charge)  # what run_with_next_steps sets around the call
    try:
        with django_assert_num_queries(0):
            held = payment_charge.held_request({**message, "payload": {"amount": "999.00"}})
        # The claim's payload, not the message's (which an attacker could have altered).
        assert held is not None and held["payload"] == claimed_charge.payload
        assert held["idempotency_key"] == claimed_charge.idempotency_key
        # Another lease for the same step: looked up, and refused (no step holds it).
        with django_assert_num_queries(1):
            assert (
                payment_charge.held_request({**message, "lease": "00000000-0000-0000-0000-000000000001"})
                is None
            )
    finally:
        eager._in_place.reset(token)
    # Outside the in-place call the same request is looked up (and held: the step is Processing).
    with django_assert_num_queries(1):
        assert payment_charge.held_request(message)["payload"] == claimed_charge.payload
    assert engine.sim.stats()["total"] == 0

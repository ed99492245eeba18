"""AgentTask.perform on the real simulator and database, called in-process (no broker needed)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agents.base import close_http_client
from orders.tasks import payment_charge
from scheduler.models import Step
from scheduler.services import run_submit, step_claim_due


@pytest.fixture(autouse=True)
def _close_client():
    yield
    close_http_client()


@pytest.fixture
def claimed_charge(engine, demo_user):
    """A run whose charge step is claimed by the test (the engine's workers never see it)."""
    run = run_submit(
        workflow="order_fulfilment",
        input={"items": [{"sku": "A", "quantity": 1}], "amount": "3.00", "currency": "EUR"},
        owner_id=demo_user.id,
        kick=False,
    )
    Step.objects.filter(run=run, seq=0).update(process_state="processed")
    Step.objects.filter(run=run, name="charge_payment").update(
        process_state="pending", payload={"amount": "3.00", "currency": "EUR", "card": "tok_ok"}
    )
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


def perform(claim, complete_by=None):
    message = claim.message()
    if complete_by is not None:
        message["complete_by"] = complete_by.isoformat()
    return payment_charge.perform(path="/payment/charge", **message)


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
    Step.objects.filter(pk=claimed_charge.step_id).update(payload={"amount": "3.00", "currency": "EUR"})
    message = claimed_charge.message()
    message["payload"] = {"amount": "3.00", "currency": "EUR", "card": "tok_decline"}

    outcome = payment_charge.perform(path="/payment/charge", **message)

    assert outcome == "accepted"
    step = Step.objects.get(pk=claimed_charge.step_id)
    assert step.process_state == "error" and step.error_permanent and "card_declined" in step.last_error

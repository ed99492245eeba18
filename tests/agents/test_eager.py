"""Eager next steps (agents/eager.py): the keeper in the scheduler's dispatch, on a real Redis
broker, and the order flow on the session's real agents worker, which serves every agent queue
(the bulkhead layout, where nothing runs in place, is checked in tests/e2e/test_bulkhead_live.py)."""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.db import transaction

from scheduler.models import Run, Step, TaskExecutionHistory
from scheduler.services import claims_dispatch, claims_kept, run_submit, step_claim_due
from tests.e2e.helpers import submit_order, wait_run
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

# The engine's test workflow routes to agent.enginetest, a queue no worker of the suite reads.
QUEUE = "agent.enginetest"


@pytest.fixture
def broker_queue(redis_client):
    key = f"{settings.REDIS_PREFIX}{QUEUE}"
    redis_client.delete(key)
    yield lambda: int(redis_client.llen(key))
    redis_client.delete(key)


@pytest.fixture
def two_claims(engine_paused, demo_user):
    """The first steps of two runs of the engine's test workflow, claimed by the test (the
    session engine, if running, is paused: its tick would claim them first)."""
    register_engine_workflow()
    runs = [
        run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=demo_user.id, kick=False)
        for _ in range(2)
    ]
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=2, run_id=None)
    assert {c.run_id for c in claims} == {str(r.id) for r in runs}
    return claims


def test_claims_dispatch__outside_a_keeper__every_claim_published(two_claims, broker_queue):
    assert claims_dispatch(two_claims) == 2
    assert broker_queue() == 2


def test_claims_kept__first_accepted_claim_kept__the_rest_published(two_claims, broker_queue):
    with claims_kept(lambda claim: True) as kept:
        sent = claims_dispatch(two_claims)

    assert sent == 1 and broker_queue() == 1
    assert kept == [two_claims[0]]


def test_claims_kept__refused_claims_published(two_claims, broker_queue):
    with claims_kept(lambda claim: claim.step_id == two_claims[1].step_id) as kept:
        sent = claims_dispatch(two_claims)

    assert sent == 1 and broker_queue() == 1
    assert kept == [two_claims[1]]
    # Once the keeper is gone, a kept claim is published like any other.
    assert claims_dispatch(kept) == 1 and broker_queue() == 2


def test_order__one_worker_serves_every_queue__next_steps_run_in_place(engine, demo_user):
    order = submit_order(demo_user)

    run = wait_run(order.run_id, (Run.State.COMPLETED,))

    steps = {s.name: s for s in run.steps.all()}
    log = engine.agents.log()
    in_place = {int(m) for m in re.findall(r"step (\d+) \(agents\.[a-z_.]+\): ran in place", log)}
    # The first step came through the broker (the submit's claim); the reply of each claimed the
    # next, which this worker serves, and ran it without a publish.
    assert steps["reserve_inventory"].pk not in in_place
    assert {steps["charge_payment"].pk, steps["create_shipment"].pk} <= in_place
    # Same fence, same history: one attempt each, succeeded; one effect each at the services.
    assert all(s.attempts == 1 and s.process_state == Step.State.PROCESSED for s in steps.values())
    attempts = TaskExecutionHistory.objects.filter(run=run, kind="attempt")
    assert sorted(attempts.values_list("status", flat=True)) == ["succeeded"] * 3
    for service, operation in (("payment", "charge"), ("shipping", "create")):
        assert len(engine.sim.ledger(service=service, operation=operation)) == 1

"""`step_request_held`: what an agent may act on (issue 26) - the step's stored request while it
is Processing under that lease for that operation, and nothing otherwise."""

from __future__ import annotations

import uuid

import pytest
from django.db import transaction

from scheduler.models import Step
from scheduler.selectors import step_request_held
from scheduler.services import run_cancel, step_claim_due, step_reply
from tests.engine_workflow import submit

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _claimed(user):
    run = submit(user)
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


def test_held__the_stored_request_not_the_message(user):
    claim = _claimed(user)
    Step.objects.filter(pk=claim.step_id).update(payload={"x": 2, "stored": True})

    held = step_request_held(step_id=claim.step_id, lease=claim.lease, operation=claim.operation)

    assert held is not None
    request = held.request()
    assert request["payload"] == {"x": 2, "stored": True}
    assert request["idempotency_key"] == claim.idempotency_key
    assert request["complete_by"] == claim.complete_by.isoformat()
    assert request["start_by"] == claim.start_by.isoformat()
    assert request["timeout"] == claim.timeout and request["attempt"] == claim.attempt == 1
    assert "heartbeat" not in request


@pytest.mark.parametrize(
    "change",
    ["lease", "operation", "step_id"],
)
def test_not_held__another_lease_operation_or_step__none(user, change):
    claim = _claimed(user)
    asked = {"step_id": claim.step_id, "lease": claim.lease, "operation": claim.operation}
    asked[change] = {"lease": str(uuid.uuid4()), "operation": "agents.payment.refund", "step_id": 987654321}[
        change
    ]

    assert step_request_held(**asked) is None


def test_not_held__once_the_run_is_cancelled__none(user):
    claim = _claimed(user)

    run_cancel(run_id=claim.run_id, actor="test")

    assert step_request_held(step_id=claim.step_id, lease=claim.lease, operation=claim.operation) is None


def test_not_held__once_its_reply_was_accepted__none(user):
    claim = _claimed(user)

    assert (
        step_reply(step_id=claim.step_id, lease=claim.lease, outcome="success", claim_next=False)
        == "accepted"
    )

    assert step_request_held(step_id=claim.step_id, lease=claim.lease, operation=claim.operation) is None


def test_lookup__by_primary_key_even_with_many_steps_in_flight(user):
    """The real statement's plan (EXPLAIN): the primary key, never the partial index of
    Processing steps filtered for the id (which the planner chose on small statistics, and
    which costs a scan of every step in flight)."""
    from django.db import connection

    from scheduler.transitions import engine_queries

    claims = [_claimed(user) for _ in range(20)]
    claim = claims[-1]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_step")
        # A table this small is read whole; the question is which index a real one would take.
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN " + engine_queries()["step_request_held"],
            {"step_id": claim.step_id, "lease": claim.lease, "operation": claim.operation},
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())

    # By id: the primary key (id, owner_id) or UNIQUE (id) (decision record 55), both lead by id.
    assert "scheduler_step_pkey" in plan or "scheduler_step_id_key" in plan, plan
    assert "step_processing_deadline_idx" not in plan, plan

"""The fair claim (issue 18, docs/operating/fairness.md) on the real PostgreSQL, the test playing the
scheduler: within a priority, an owner with fewer steps of an operation in flight is claimed
first, so one owner's backlog does not hold another owner's due step back."""

from __future__ import annotations

import pytest
from django.db import transaction

from scheduler.models import Step
from scheduler.services import RunSpec, runs_submit_many, step_claim_due, step_reply
from scheduler.workflows import get_workflow
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = pytest.mark.django_db

FIRST_OPERATION = "agents.enginetest.a"


@pytest.fixture
def owners(django_user_model):
    return {name: django_user_model.objects.create(username=f"fair-{name}") for name in "ABC"}


def backlog(owner, n: int, *, priority: int = 0) -> list:
    """`n` runs of `owner`, their first steps Pending and due, written in one statement."""
    definition = get_workflow(ENGINE_WORKFLOW)
    spec = RunSpec(definition=definition, input=dict(ENGINE_INPUT), owner_id=owner.id, priority=priority)
    with transaction.atomic():
        return runs_submit_many([spec] * n, kick=False)


def claim(limit: int, **kwargs) -> list[int]:
    """Owner ids of the steps one claim took, in the order the claim picked them."""
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=limit, **kwargs)
    owners = dict(Step.objects.filter(pk__in=[c.step_id for c in claims]).values_list("pk", "owner_id"))
    return [owners[c.step_id] for c in claims]


def test_steps__carry_their_runs_owner(owners):
    (run_id,) = backlog(owners["A"], 1)

    assert set(Step.objects.filter(run_id=run_id).values_list("owner_id", flat=True)) == {owners["A"].id}


def test_claim_due__owner_with_a_backlog_in_flight__newer_step_of_an_idle_owner_goes_first(owners):
    backlog(owners["B"], 200)
    assert claim(5) == [owners["B"].id] * 5  # B alone: its oldest, as before
    backlog(owners["A"], 1)  # the newest Pending row of all

    # B has 5 of the operation in flight, A none: A's one step is the next claimed.
    assert claim(1) == [owners["A"].id]


def test_claim_due__batch__interleaves_owners_until_their_in_flight_is_level(owners):
    backlog(owners["B"], 100)
    backlog(owners["A"], 5)
    backlog(owners["C"], 5)

    taken = claim(9)

    assert sorted(taken) == sorted([owners["A"].id] * 3 + [owners["B"].id] * 3 + [owners["C"].id] * 3)
    # With 3 each in flight, the next batch of 3 again takes one of each.
    assert sorted(claim(3)) == sorted(owners[n].id for n in "ABC")


def test_claim_due__priority__still_comes_first_across_owners(owners):
    backlog(owners["B"], 20, priority=5)
    assert claim(10) == [owners["B"].id] * 10
    backlog(owners["A"], 3, priority=0)

    # B's higher priority wins even with 10 in flight against A's none: fairness is within a priority.
    assert claim(5) == [owners["B"].id] * 5


def test_claim_due__one_operation__fair_within_it(owners):
    backlog(owners["B"], 50)
    backlog(owners["A"], 2)

    assert sorted(claim(4, operation=FIRST_OPERATION)) == sorted([owners["A"].id] * 2 + [owners["B"].id] * 2)


def test_reply__one_more_claim__goes_to_the_owner_with_fewest_in_flight(owners):
    backlog(owners["B"], 50)
    with transaction.atomic():
        b_claims = step_claim_due(instance="test", limit=4)
    (a_run,) = backlog(owners["A"], 1)
    a_step = Step.objects.get(run_id=a_run, seq=0)

    # B's step succeeds: the reply claims its run's next step and one more step of the
    # operation whose slot it freed - A's (none in flight), not B's 46 older ones (3 in flight).
    step_reply(step_id=b_claims[0].step_id, lease=b_claims[0].lease, outcome="success", result={})

    a_step.refresh_from_db()
    assert a_step.process_state == Step.State.PROCESSING
    assert Step.objects.filter(owner_id=owners["B"].id, seq=0, process_state="processing").count() == 3

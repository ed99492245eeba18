"""The dispatcher's claim when another transaction holds a due row's job (a "run now", an edit,
a settle): that row is locked but not fired and stays due; the others are fired, and the batch
counts it as locked, so the tick does not take the shard for drained."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction

from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.tick import jobs_dispatch_batch
from scheduler.models import Job, Run, ScheduledJob

from .jobs_support import make_due, new_job, rows_held


def test_claim__a_row_whose_job_another_holds__locked_not_returned_and_left_due(live_db: None) -> None:
    from tests.engine_workflow import register_engine_workflow

    register_engine_workflow()
    user, _ = get_user_model().objects.get_or_create(username="claim-held")
    jobs = [new_job(user, name=f"j{i}") for i in range(3)]
    times = {job.pk: make_due(job) for job in jobs}
    with rows_held(Job.objects.filter(pk=jobs[0].pk)), transaction.atomic():
        claim = job_transitions.scheduled_claim_due(limit=3)

    assert claim.locked == 3
    assert sorted(r.job_id for r in claim.rows) == sorted(j.pk for j in jobs[1:])
    row = ScheduledJob.objects.get(job=jobs[0], kind=ScheduledJob.Kind.NEXT)
    assert (row.scheduled_for, row.next_execution_at) == (times[jobs[0].pk], times[jobs[0].pk])


def test_batch__a_held_job_does_not_end_the_shard_early__the_rest_fired_the_held_one_later(
    live_db: None,
) -> None:
    from tests.engine_workflow import register_engine_workflow

    register_engine_workflow()
    user, _ = get_user_model().objects.get_or_create(username="claim-held-batch")
    jobs = [new_job(user, name=f"j{i}") for i in range(3)]
    for job in jobs:
        make_due(job)
    with rows_held(Job.objects.filter(pk=jobs[0].pk)):
        first = jobs_dispatch_batch(instance="test-held", limit=3)

    # Full by what it locked (a tick drains on), short by what it fired.
    assert (first.locked, first.claimed, first.started) == (3, 2, 2)
    assert set(Run.objects.values_list("job_id", flat=True)) == {jobs[1].pk, jobs[2].pk}

    second = jobs_dispatch_batch(instance="test-held", limit=3)

    assert (second.locked, second.claimed, second.started) == (1, 1, 1)
    assert sorted(Run.objects.values_list("job_id", flat=True)) == sorted(j.pk for j in jobs)

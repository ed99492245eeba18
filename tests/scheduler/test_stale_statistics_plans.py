"""Plans of the engine's statements on statistics taken before the rows they meet (issue 29,
item 5; bench/stats_after_burst.py): the tables are ANALYZEd nearly empty, then filled, as a
burst leaves them until the next ANALYZE. Each statement must read by key whatever the
statistics say."""

from __future__ import annotations

import re

import pytest
from django.db import connection, transaction

from scheduler import transitions
from scheduler.models import Step, StepState, TaskExecutionHistory
from scheduler.services import step_claim_due
from scheduler.transitions import AttemptOutcome
from tests.scheduler.test_transitions import _plan_of, plans, submit  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _stale_and_processing(user, runs: int) -> list:
    """The step and history tables analysed with nothing in flight, then `runs` steps claimed."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_step; ANALYZE scheduler_taskexecutionhistory")
    for _ in range(runs):
        submit(user)
    with transaction.atomic():
        return step_claim_due(instance="test", limit=runs)


def test_step_fail__stale_statistics__locks_by_key_and_closes_history_by_lease(user, plans):  # noqa: F811
    claims = _stale_and_processing(user, 30)
    assert len(claims) == 30
    plans.clear()

    failed = transitions.step_fail(
        attempts=[AttemptOutcome(step_id=c.step_id, lease=c.lease, error="boom") for c in claims[:3]],
        cause=TaskExecutionHistory.Status.TIMED_OUT,
        actor="t",
        history_kind=TaskExecutionHistory.Kind.SUPERVISOR,
        require_live=False,
    )

    assert len(failed.retried) == 3
    assert Step.objects.filter(process_state=StepState.PROCESSING).count() == 27
    closed = TaskExecutionHistory.objects.filter(
        lease__in=[c.lease for c in claims[:3]], kind="attempt", status=TaskExecutionHistory.Status.TIMED_OUT
    )
    assert closed.count() == 3
    # The steps are locked and updated by primary key, never by a scan of the Processing index
    # (on a burst's stale statistics it was read whole once per step failed).
    fail = _plan_of(plans, "sas_uuid7(), run_id, id, 'step_retrying'")
    assert "step_processing_deadline_idx" not in fail, fail
    # By its id: the primary key (id, owner_id) or the UNIQUE (id) kept beside it (decision 55).
    assert re.search(r"Index Scan (using|on) scheduler_step_(pkey|id_key)", fail), fail
    # Each attempt's history row is found by its lease, as an index condition: no join of the
    # failed steps to a whole partition of the history.
    close = _plan_of(plans, "SET status = p_cause")
    assert "Index Cond: (lease = " in close, close

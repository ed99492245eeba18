"""The supervisor's sweep on the real PostgreSQL: expired attempts retried or errored, alerts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from supervisor.services import step_expire_sweep
from tests.engine_workflow import claim_one, expire, submit

pytestmark = pytest.mark.django_db


def test_sweep__expired_step_at_limit__error_alert_and_compensation(user):
    run = submit(user)
    Step.objects.filter(run=run, seq=0).update(max_failures=1)
    claim = claim_one(run)
    expire(claim.step_id)

    result = step_expire_sweep(batch=10, instance="sup")

    assert (result.examined, result.errored) == (1, 1)
    run.refresh_from_db()
    assert run.state == "compensating"
    comp = run.steps.get(kind="compensation")
    assert comp.name == "undo_a" and comp.process_state == "pending"
    alert = run.alerts.get()
    # Raised by the supervisor from the engine's step_errored signal, in the same transaction.
    assert alert.kind == "step_error" and alert.step_id == claim.step_id
    assert alert.message.startswith("a: timed_out 1 times (limit 1)")


def test_sweep__mixed_batch__under_limit_retried_with_backoff_at_limit_errored(user):
    retry_run, limit_run = submit(user), submit(user)
    Step.objects.filter(run=retry_run, seq=0).update(backoff_base=2.0, backoff_max=60.0)
    Step.objects.filter(run=limit_run, seq=0).update(max_failures=1)
    retry_claim, limit_claim = claim_one(retry_run), claim_one(limit_run)
    expire(retry_claim.step_id)
    expire(limit_claim.step_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        before = cursor.fetchone()[0]

    result = step_expire_sweep(batch=10, instance="sup")

    assert (result.examined, result.retried, result.errored) == (2, 1, 1)
    step = Step.objects.get(pk=retry_claim.step_id)
    assert step.process_state == "pending" and step.failure_count == 1
    assert step.lease is None and step.locked_by is None and step.complete_by is None
    # Equal jitter on base 2 s, first failure: between 1 and 2 s from now.
    assert timedelta(seconds=0.99) <= step.not_before - before <= timedelta(seconds=2.5)
    assert step.last_error == "no reply before complete_by 2000-01-01T00:00:00.000000+00:00"
    history = {h.kind: h for h in TaskExecutionHistory.objects.filter(step=step)}
    assert history["attempt"].status == "timed_out" and history["attempt"].ended_at is not None
    decision = history["supervisor"]
    assert decision.status == "retry_scheduled" and decision.worker == "sup" and decision.retry_count == 1
    assert decision.detail["failed_lease"] == retry_claim.lease
    assert 1.0 <= decision.detail["backoff_seconds"] <= 2.0
    retrying = RunEvent.objects.get(run=retry_run, type="step_retrying")
    assert retrying.step_id == step.pk and retrying.data["failure_count"] == 1
    assert Step.objects.get(pk=limit_claim.step_id).process_state == "error"
    assert Run.objects.get(pk=limit_run.id).state == "compensating"
    # The retried step is claimable again once its backoff has passed, under a new lease.
    Step.objects.filter(pk=step.pk).update(not_before=datetime(2000, 1, 1, tzinfo=UTC))
    again = claim_one(retry_run)
    assert again.step_id == step.pk and again.lease != retry_claim.lease and again.attempt == 2


def test_sweep__nothing_expired__changes_nothing(user):
    run = submit(user)
    claim_one(run)

    result = step_expire_sweep(batch=10, instance="sup")

    assert result.examined == 0
    assert Step.objects.get(run=run, seq=0).process_state == "processing"

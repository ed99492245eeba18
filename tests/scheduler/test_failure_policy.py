"""What an attempt that did not succeed costs (issue 7), on the real PostgreSQL: deferrals and
requeues are free, reached attempts count, the whole-step deadline bounds the rest, an undo never
gives up on its own, and only steps that may have had an effect are compensated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from alerting.models import Alert
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.services import (
    StepNotMarkable,
    run_give_up,
    run_submit,
    step_claim_due,
    step_compensation_mark_done,
    step_reply,
)
from scheduler.signals import step_struggling
from supervisor.services import step_expire_sweep
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def submit(user, **kwargs):
    return run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False, **kwargs)


def claim(run):
    Step.objects.filter(run=run, process_state="pending").update(not_before=datetime(2000, 1, 1, tzinfo=UTC))
    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=1, run_id=run.id)
    assert len(claims) == 1, list(
        Step.objects.filter(run=run).values_list("name", "process_state", "not_before")
    )
    return claims[0]


def test_defer__breaker_open__pending_at_probe_time_no_failure_counted(user):
    run = submit(user)
    c = claim(run)

    outcome = step_reply(
        step_id=c.step_id, lease=c.lease, outcome="deferred", error="circuit open for x", retry_after=4.0
    )

    assert outcome == "accepted"
    step = Step.objects.get(pk=c.step_id)
    assert step.process_state == "pending" and step.failure_count == 0 and not step.reached
    assert timedelta(seconds=3.5) < step.not_before - timezone.now() <= timedelta(seconds=4.2)
    attempt = TaskExecutionHistory.objects.get(lease=c.lease, kind="attempt")
    assert attempt.status == "deferred" and attempt.error == "circuit open for x"
    decision = TaskExecutionHistory.objects.get(step=step, kind="scheduler")
    assert decision.detail["counted"] is False and decision.detail["cause"] == "deferred"


def test_defer__many_times__never_errors_before_the_deadline(user):
    run = submit(user)
    for _ in range(10):
        c = claim(run)
        step_reply(
            step_id=c.step_id,
            lease=c.lease,
            outcome="deferred",
            error="circuit open",
            retry_after=0,
            claim_next=False,
        )

    step = Step.objects.get(pk=c.step_id)
    assert step.process_state == "pending" and step.failure_count == 0 and step.attempts == 10


def test_defer__next_probe_after_the_whole_step_deadline__step_errors_and_run_compensates(user):
    run = submit(user)
    c = claim(run)
    Step.objects.filter(pk=c.step_id).update(close_by=timezone.now() + timedelta(seconds=1))

    step_reply(step_id=c.step_id, lease=c.lease, outcome="deferred", error="circuit open", retry_after=5)

    step = Step.objects.get(pk=c.step_id)
    assert step.process_state == "error" and step.failure_count == 0
    run.refresh_from_db()
    assert run.state == "compensated"  # nothing reached the service: nothing to undo
    assert not run.steps.filter(kind="compensation").exists()
    skipped = run.events.get(type=RunEvent.Type.COMPENSATION_SKIPPED)
    assert skipped.step_id == step.pk and "no attempt reached" in skipped.data["reason"]
    decision = TaskExecutionHistory.objects.get(step=step, status="errored")
    assert decision.detail["give_up"] == "deadline"
    # The outage is one incident: an alert, counted per step that gave up.
    alert = Alert.objects.get()
    assert (alert.kind, alert.subject, alert.state) == ("step_error", "a", "firing")
    assert list(alert.links.values_list("run_id", flat=True)) == [run.pk]


def test_transient__reached__counted_and_the_step_is_compensated(user):
    run = submit(user)
    Step.objects.filter(run=run, seq=0).update(max_failures=1)
    c = claim(run)

    step_reply(step_id=c.step_id, lease=c.lease, outcome="transient", error="inventory answered 503")

    step = Step.objects.get(pk=c.step_id)
    assert step.process_state == "error" and step.failure_count == 1 and step.reached
    assert run.steps.get(kind="compensation").name == "undo_a"


def test_sweep__attempt_never_started__requeued_without_a_failure(user):
    run = submit(user)
    c = claim(run)
    Step.objects.filter(pk=c.step_id).update(start_by=datetime(2000, 1, 1, tzinfo=UTC))

    result = step_expire_sweep(batch=10, instance="sup")

    assert result.requeued == 1 and result.retried == 0
    step = Step.objects.get(pk=c.step_id)
    assert step.process_state == "pending" and step.failure_count == 0 and step.lease is None
    assert TaskExecutionHistory.objects.get(lease=c.lease, kind="attempt").status == "requeued"


def test_sweep__attempt_started_still_in_time__marked_started_left_alone(user):
    from scheduler.attempts import attempt_mark_started

    run = submit(user)
    c = claim(run)
    attempt_mark_started(lease=c.lease, ttl_seconds=60)
    Step.objects.filter(pk=c.step_id).update(start_by=datetime(2000, 1, 1, tzinfo=UTC))

    result = step_expire_sweep(batch=10, instance="sup")

    assert result.requeued == 0 and result.retried == 0
    step = Step.objects.get(pk=c.step_id)
    assert step.process_state == "processing" and step.start_by is None and str(step.lease) == c.lease
    # ...and judged at complete_by, as a failure that counts (it may have reached the service).
    Step.objects.filter(pk=c.step_id).update(complete_by=datetime(2000, 1, 1, tzinfo=UTC))
    assert step_expire_sweep(batch=10, instance="sup").retried == 1
    step.refresh_from_db()
    assert step.failure_count == 1 and step.reached


def _compensating_run(user):
    """A run whose first step succeeded and whose second was refused: undo_a is Pending."""
    run = submit(user)
    c = claim(run)
    step_reply(step_id=c.step_id, lease=c.lease, outcome="success", result={}, claim_next=False)
    c = claim(run)
    step_reply(step_id=c.step_id, lease=c.lease, outcome="permanent", error="refused (400)")
    run.refresh_from_db()
    assert run.state == "compensating"
    return run


def test_compensation__never_errors_on_its_count__alerts_once_and_keeps_trying(user):
    run = _compensating_run(user)
    struggling: list[int] = []

    def receiver(sender, step_id, **kwargs):
        struggling.append(step_id)

    step_struggling.connect(receiver, dispatch_uid="test-struggling")
    try:
        for _ in range(9):
            c = claim(run)
            step_reply(
                step_id=c.step_id,
                lease=c.lease,
                outcome="transient",
                error="inventory answered 503",
                claim_next=False,
            )
    finally:
        step_struggling.disconnect(dispatch_uid="test-struggling")

    undo = run.steps.get(name="undo_a")
    assert undo.process_state == "pending" and undo.failure_count == 9
    assert struggling == [undo.pk]  # once, at its threshold (3 in the engine workflow)
    run.refresh_from_db()
    assert run.state == "compensating"
    alert = Alert.objects.get(kind="compensation_struggling", subject="undo_a")
    assert alert.severity == "critical" and alert.count == 1


def test_mark_done__operator_finishes_the_undo_by_hand__run_compensated(user):
    run = _compensating_run(user)
    undo = run.steps.get(name="undo_a")

    with pytest.raises(StepNotMarkable):
        step_compensation_mark_done(step_id=undo.pk, actor="ops", reason="  ")
    step_compensation_mark_done(step_id=undo.pk, actor="ops", reason="released in the warehouse UI")

    undo.refresh_from_db()
    assert undo.process_state == "processed" and undo.result["marked_done_by"] == "ops"
    run.refresh_from_db()
    assert run.state == "compensated"
    assert run.steps.get(name="a").process_state == "compensated"
    with pytest.raises(StepNotMarkable):
        step_compensation_mark_done(step_id=undo.pk, actor="ops", reason="again")


def test_give_up__operator_stops_a_compensation__run_failed_with_the_reason(user):
    run = _compensating_run(user)

    run_give_up(run_id=run.id, actor="ops", reason="customer refunded by phone")

    run.refresh_from_db()
    assert run.state == "failed" and "customer refunded by phone" in run.error
    assert run.events.filter(type="failed").exists()
    assert Run.objects.filter(pk=run.id, state="failed").exists()


def test_permanent_refusal_of_a_forward_step__no_alert(user):
    run = submit(user)
    c = claim(run)

    step_reply(step_id=c.step_id, lease=c.lease, outcome="permanent", error="card declined")

    run.refresh_from_db()
    assert run.state == "compensated" and not Alert.objects.exists()

"""Each rule kind fires once per incident - evaluated again and again, one alert - links every
affected run, and resolves when its condition clears; both announced once. Real PostgreSQL and
Redis, the evaluator called in-process (tests/alerting/test_live.py runs it in real workers)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.db.models import F
from django.utils import timezone

from agents.breaker import CircuitBreaker
from alerting.models import Alert, AlertRule
from alerting.services import alert_email_build, alert_rules_evaluate
from alerting.tasks import alert_email_send
from liveness.heartbeat import consumers_beat
from liveness.last_run import last_run_key, last_run_record
from ops.selectors import alerts_open_by_severity, runs_need_attention_count
from scheduler.models import Run, ScheduledJob, Step, TaskExecutionHistory

from .conftest import error_step, job, rule, run, user

pytestmark = pytest.mark.usefixtures("no_rules")


def tick() -> None:
    assert alert_rules_evaluate().ran


def only_alert(r: AlertRule) -> Alert:
    (alert,) = Alert.objects.filter(rule=r)
    return alert


def assert_fires_once(r: AlertRule, *, subject: str = "", runs: set[Any] | None = None) -> Alert:
    tick()
    tick()  # an incident is one alert however often it is evaluated
    alert = only_alert(r)
    assert (alert.state, alert.subject, alert.announced_state) == ("firing", subject, "firing")
    if runs is not None:
        assert set(alert.links.values_list("run_id", flat=True)) == runs
        assert alert.count == len(runs)
    return alert


def assert_resolves(r: AlertRule) -> None:
    tick()
    tick()
    alert = only_alert(r)
    assert (alert.state, alert.announced_state) == ("resolved", "resolved")
    assert alert.resolved_at is not None


def test_workflow_failure_rate__over_threshold__fires_links_failed_runs_then_resolves() -> None:
    r = rule("workflow_failure_rate", target="wf", threshold=0.5, min_runs=4, window=timedelta(minutes=10))
    failed = [run(state="compensated"), run(state="failed"), run(state="compensated")]
    run(state="completed")
    run(workflow="other", state="failed")  # another workflow: not this incident
    run(state="compensated", ago=timedelta(hours=1))  # outside the window
    alert = assert_fires_once(r, subject="wf", runs={x.pk for x in failed})
    assert "3 of 4 runs failed (75%)" in alert.message

    Run.objects.filter(workflow="wf").update(created_at=timezone.now() - timedelta(hours=1))
    assert_resolves(r)


def test_workflow_failure_rate__below_min_runs__no_alert() -> None:
    r = rule("workflow_failure_rate", threshold=0.5, min_runs=5)
    for _ in range(4):
        run(state="failed")
    tick()
    assert not Alert.objects.filter(rule=r).exists()


def test_job_failure_rate_and_consecutive_failures__on_a_job__fire_and_resolve() -> None:
    owner = user("alice")
    j = job(owner)
    rate = rule("job_failure_rate", job=j, threshold=0.5, min_runs=3)
    streak = rule("job_consecutive_failures", job=j, threshold=3)
    failed = [run(state="compensated", job=j, ago=timedelta(seconds=10 - i)) for i in range(3)]
    assert_fires_once(rate, subject=str(j.pk), runs={x.pk for x in failed})
    assert_fires_once(streak, subject=str(j.pk), runs={x.pk for x in failed})

    run(state="completed", job=j)  # the streak is broken; 3 of 4 still fail
    tick()
    assert only_alert(streak).state == "resolved"
    assert only_alert(rate).state == "firing"


def test_service_failure_rate__attempts_failing__fires_per_service() -> None:
    r = rule("service_failure_rate", threshold=0.5, min_runs=4)
    parent = run(state="running")
    step = error_step(parent)
    now = timezone.now()
    for status in ("failed_transient", "timed_out", "failed_transient", "succeeded"):
        TaskExecutionHistory.objects.create(
            step=step, run=parent, kind="attempt", status=status, started_at=now
        )
    assert_fires_once(r, subject="payment")
    TaskExecutionHistory.objects.update(started_at=now - timedelta(hours=1))
    assert_resolves(r)


def test_job_missed_runs_dispatch_lag_due_backlog__late_occurrence__fire_and_resolve() -> None:
    j = job(user("bob"))
    missed = rule("job_missed_runs", job=j, threshold=60)
    lag = rule("dispatch_lag", threshold=60)
    backlog = rule("due_backlog", threshold=0)
    ScheduledJob.objects.filter(job=j).update(next_execution_at=timezone.now() - timedelta(minutes=5))
    assert_fires_once(missed, subject=str(j.pk))
    assert_fires_once(lag)
    assert_fires_once(backlog)
    ScheduledJob.objects.filter(job=j).update(next_execution_at=timezone.now() + timedelta(hours=1))
    for r in (missed, lag, backlog):
        assert_resolves(r)


def test_step_error__same_step_on_many_runs__one_alert_every_run_linked() -> None:
    r = rule("step_error", window=timedelta(hours=1))
    runs = [run(state="compensated") for _ in range(4)]
    for x in runs:
        error_step(x)
    assert_fires_once(r, subject="charge_payment", runs={x.pk for x in runs})
    Step.objects.update(finished_at=timezone.now() - timedelta(hours=2))
    assert_resolves(r)


def test_run_needs_operator__refunds_failing_on_4_runs__one_alert_4_runs_needing_attention() -> None:
    r = rule("run_needs_operator", severity="critical", window=timedelta(days=7))
    failed = [run(state="failed") for _ in range(4)]
    alert = assert_fires_once(r, runs={x.pk for x in failed})
    assert alert.count == 4
    assert runs_need_attention_count() == 4
    assert ("critical", "Critical", 1) in alerts_open_by_severity()

    Run.objects.filter(pk__in=[x.pk for x in failed]).update(state="compensated")  # an operator fixed them
    assert_resolves(r)
    assert runs_need_attention_count() == 0


def test_compensation_struggling__undo_past_its_threshold__fires_and_resolves() -> None:
    r = rule("compensation_struggling")
    parent = run(state="compensating")
    Step.objects.create(
        run=parent,
        name="refund_payment",
        kind="compensation",
        seq=1000,
        operation="agents.payment.refund",
        idempotency_key=str(uuid.uuid4()),
        process_state="pending",
        failure_count=3,
        max_failures=3,
    )
    assert_fires_once(r, subject="refund_payment", runs={parent.pk})
    Step.objects.filter(run=parent).update(process_state="compensated")
    assert_resolves(r)


def test_steps_overdue__processing_past_complete_by__fires_and_resolves() -> None:
    r = rule("steps_overdue", threshold=0)
    parent = run(state="running")
    Step.objects.create(
        run=parent,
        name="reserve",
        seq=0,
        operation="agents.inventory.reserve",
        idempotency_key=str(uuid.uuid4()),
        process_state="processing",
        lease=uuid.uuid4(),
        locked_by="w1",
        complete_by=timezone.now() - timedelta(minutes=1),
    )
    assert_fires_once(r, runs={parent.pk})
    Step.objects.update(process_state="processed", lease=None, locked_by=None)
    assert_resolves(r)


def test_circuit_open__longer_than_threshold__pending_then_firing_then_resolved(redis_client: Any) -> None:
    breaker = CircuitBreaker("alerttest", failure_threshold=1)
    breaker.record_failure()
    r = rule("circuit_open", target="alerttest", threshold=3600)
    tick()
    assert only_alert(r).state == "pending"  # open, but not for an hour yet: nobody is told
    Alert.objects.filter(rule=r).update(created_at=timezone.now() - timedelta(hours=2))
    assert_fires_once(r, subject="alerttest")
    breaker.reset()
    assert_resolves(r)


def test_queue_no_consumer__work_and_no_heartbeat__fires_then_a_consumer_resolves_it(
    redis_client: Any,
) -> None:
    r = rule("queue_no_consumer", target="alerttest.q")
    prefix = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    redis_client.lpush(f"{prefix}alerttest.q", "{}")
    try:
        alert = assert_fires_once(r, subject="alerttest.q")
        assert "1 message and no live consumer" in alert.message
        consumers_beat(queues=["alerttest.q"], worker="w1@test")
        assert_resolves(r)
    finally:
        redis_client.delete(f"{prefix}alerttest.q")


def test_periodic_not_run__sweep_older_than_n_intervals__fires_and_resolves(
    redis_client: Any, settings: Any
) -> None:
    # A key prefix of this test's own: a live test's engine (its beat and control worker may
    # still run in this test process's session) records the real sweep's last run under the
    # session's prefix, and would resolve the incident between two evaluations.
    settings.REDIS_PREFIX = f"{settings.REDIS_PREFIX}deadman-{uuid.uuid4().hex[:8]}:"
    r = rule("periodic_not_run", target="sas: supervisor sweep", threshold=5)
    redis_client.hset(last_run_key(), "supervisor.sweep", str(timezone.now().timestamp() - 3600))
    alert = assert_fires_once(r, subject="sas: supervisor sweep")
    assert "has not run for" in alert.message
    last_run_record(task="supervisor.sweep")
    assert_resolves(r)


def test_for_duration__condition_shorter_than_it__never_announced() -> None:
    r = rule("run_needs_operator", for_duration=timedelta(minutes=5))
    failed = run(state="failed")
    tick()
    assert (only_alert(r).state, only_alert(r).announced_state) == ("pending", "")
    Run.objects.filter(pk=failed.pk).update(state="compensated")
    tick()
    assert (only_alert(r).state, only_alert(r).announced_state) == ("resolved", "resolved")


def _incidents(r: AlertRule) -> list[Alert]:
    return list(Alert.objects.filter(rule=r).order_by("pk"))


def _age(alert: Alert, *, by: timedelta) -> None:
    """The incident began `by` earlier (its for-duration passed meanwhile)."""
    Alert.objects.filter(pk=alert.pk).update(created_at=F("created_at") - by)


def test_cooldown__return_within_it__waits_its_for_duration_and_reports_its_own_start() -> None:
    """Issue 27: the return was reopened firing at once (6 s into a "for 30 s" rule) and its mail
    showed the first incident's "Fired at" and count."""
    r = rule("run_needs_operator", cooldown=timedelta(hours=1), for_duration=timedelta(seconds=30))
    failed = run(state="failed")
    tick()
    (first,) = _incidents(r)
    assert first.state == "pending"
    _age(first, by=timedelta(minutes=1))
    tick()
    first.refresh_from_db()
    assert (first.state, first.announced_state) == ("firing", "firing")  # paged
    Run.objects.filter(pk=failed.pk).update(state="compensated")
    tick()
    first.refresh_from_db()
    assert (first.state, first.announced_state) == ("resolved", "resolved")

    Run.objects.filter(pk=failed.pk).update(state="failed")  # back within the cooldown
    tick()
    first_again, second = _incidents(r)
    assert (first_again.state, first_again.fired_at) == ("resolved", first.fired_at)
    assert second.state == "pending"  # its own for-duration, not firing at once
    _age(second, by=timedelta(minutes=1))
    tick()
    second.refresh_from_db()
    assert second.state == "firing" and second.fired_at > first.resolved_at and second.count == 1
    assert second.announced_state == ""  # its page waits for the cooldown since the last page

    Alert.objects.filter(pk=first.pk).update(announced_at=timezone.now() - timedelta(hours=2))
    tick()
    second.refresh_from_db()
    assert second.announced_state == "firing"  # one page for this incident
    message = alert_email_build(alert_id=second.pk, state="firing")
    assert message is not None
    assert f"Fired at: {second.fired_at.isoformat()}" in str(message.body)
    assert "Occurrences: 1" in str(message.body)


def test_cooldown__return_ending_before_its_page__nobody_told_it_began_or_ended() -> None:
    r = rule("run_needs_operator", cooldown=timedelta(hours=1))
    failed = run(state="failed")
    tick()
    Run.objects.filter(pk=failed.pk).update(state="compensated")
    tick()
    Run.objects.filter(pk=failed.pk).update(state="failed")
    tick()
    first, second = _incidents(r)
    assert (first.announced_state, second.state, second.announced_state) == ("resolved", "firing", "")
    Run.objects.filter(pk=failed.pk).update(state="compensated")
    tick()
    second.refresh_from_db()
    assert (second.state, second.announced_state) == ("resolved", "resolved")
    assert not Alert.objects.exclude(state=F("announced_state")).exists()  # nothing left to send


def test_engine_signal_and_evaluator__same_incident__one_alert() -> None:
    from alerting.transitions import alert_raise

    r = rule("step_error")
    parent = run(state="compensated")
    step = error_step(parent)
    alert_raise(kind="step_error", subject="charge_payment", run_id=parent.pk, step_id=step.pk, message="x")
    tick()
    alert = only_alert(r)
    assert alert.state == "firing" and alert.count == 1
    assert list(alert.links.values_list("run_id", flat=True)) == [parent.pk]


def test_announcement__email__names_rule_and_runs__resolution_mailed_too(
    django_capture_on_commit_callbacks: Any,
) -> None:
    r = rule("run_needs_operator", notify_email=True, recipients="ops@example.com, oncall@example.com")
    failed = run(state="failed")
    with django_capture_on_commit_callbacks() as callbacks:
        tick()
    assert len(callbacks) == 1  # the e-mail task, queued on commit
    alert = only_alert(r)
    assert alert_email_send(alert_id=alert.pk, state="firing")
    (message,) = mail.outbox
    assert message.to == ["ops@example.com", "oncall@example.com"]
    assert "FIRING" in message.subject and r.name in message.subject
    assert str(failed.pk) in str(message.body)

    Run.objects.filter(pk=failed.pk).update(state="compensated")
    with django_capture_on_commit_callbacks() as callbacks:
        tick()
    assert len(callbacks) == 1
    assert alert_email_send(alert_id=alert.pk, state="resolved")
    assert "RESOLVED" in mail.outbox[1].subject


def test_one_rule_failing_to_read__skipped_alone__its_kind_and_the_others_still_evaluated(
    caplog: Any,
) -> None:
    # A window no timestamp can go back to: its statement fails ("timestamp out of range") and
    # with it the pipeline of every kind; the other rules, of its kind and of others, still fire.
    broken = rule("step_error", window=timedelta(days=999_999_999))
    sibling = rule("step_error", window=timedelta(hours=1))
    other = rule("run_needs_operator", window=timedelta(days=7))
    failed = run(state="failed")
    error_step(failed)
    with caplog.at_level("WARNING", logger="sas.alerts"):
        tick()
    assert not Alert.objects.filter(rule=broken).exists()
    assert only_alert(sibling).state == "firing" and only_alert(other).state == "firing"
    assert f"alert rule {broken.pk} (step_error) could not be evaluated" in caplog.text

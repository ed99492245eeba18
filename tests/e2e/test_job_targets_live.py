"""Job targets end to end on the session's real workers, beat, PostgreSQL, Redis and simulator:
a `@schedulable` task run as `task:<name>` by the agent worker, and `http.call` against the
simulator's /echo (a 5xx retried to success, a 4xx given up at once)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

from django.utils import timezone

from agents.http_call import HTTP_CALL_WORKFLOW
from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.services import run_submit
from webhooks.models import WebhookDelivery, WebhookSubscription

from .helpers import wait_run


def _deliveries(user) -> dict[str, WebhookDelivery]:
    """An outbox with one delivery in each situation the purge must tell apart."""
    run = Run.objects.create(workflow="webhook_delivery", input={}, state=Run.State.COMPLETED, owner=user)
    subscription = WebhookSubscription.objects.create(
        run=run, owner=user, url="http://receiver.test/hook", correlation_id="c-1"
    )
    old = timezone.now() - timedelta(days=40)
    made: dict[str, WebhookDelivery] = {}
    for sequence, (name, state, created) in enumerate(
        [
            ("old_delivered", WebhookDelivery.State.DELIVERED, old),
            ("old_given_up", WebhookDelivery.State.GIVEN_UP, old),
            ("old_pending", WebhookDelivery.State.PENDING, old),
            ("recent_delivered", WebhookDelivery.State.DELIVERED, timezone.now()),
        ]
    ):
        event = RunEvent.objects.create(run=run, type=RunEvent.Type.COMPLETED)
        delivery = WebhookDelivery.objects.create(
            subscription=subscription,
            event=event,
            event_type=event.type,
            sequence=sequence,
            url=subscription.url,
            body="{}",
            state=state,
        )
        finished = None if state == WebhookDelivery.State.PENDING else created
        WebhookDelivery.objects.filter(pk=delivery.pk).update(created_at=created, finished_at=finished)
        made[name] = delivery
    return made


def test_task_job__purge_deliveries__runs_on_the_agent_worker_and_completes(engine, demo_user):
    made = _deliveries(demo_user)

    run = run_submit(
        workflow="task:webhooks.purge_deliveries",
        input={"kwargs": {"older_than_days": 30}},
        owner_id=demo_user.id,
    )
    run = wait_run(run.id, (Run.State.COMPLETED,))

    (step,) = run.steps.all()
    assert step.result == {"deleted": 2, "more": False}
    left = set(WebhookDelivery.objects.values_list("pk", flat=True))
    assert left == {made["old_pending"].pk, made["recent_delivered"].pk}
    (attempt,) = TaskExecutionHistory.objects.filter(step=step, kind="attempt")
    assert attempt.status == "succeeded"
    # Run by the agents worker (nothing in this process consumes agent.tasks).
    assert "agents.tasks.run[" in engine.agents.log()


def _http_run(user, url: str, **extra) -> Run:
    return run_submit(
        workflow=HTTP_CALL_WORKFLOW,
        input={"method": "POST", "url": url, "headers": {"X-Job": "nightly"}, "body": {"n": 1}, **extra},
        owner_id=user.id,
    )


def test_http_job__5xx_then_success__retried_and_completed_with_one_effect(engine, demo_user):
    base = os.environ["SIMULATOR_URL"]

    run = _http_run(demo_user, f"{base}/echo/hook?status=503&fail_times=1")
    run = wait_run(run.id, (Run.State.COMPLETED,))

    (step,) = run.steps.all()
    assert step.attempts == 2 and step.failure_count == 1
    assert step.result["status"] == 200 and step.result["body_truncated"] is False
    echoed = json.loads(step.result["body"])
    assert echoed["idempotency_key"] == step.idempotency_key == f"{run.id}:call"
    assert echoed["headers"]["x-job"] == "nightly"
    assert echoed["headers"]["content-type"] == "application/json"
    assert json.loads(echoed["body"]) == {"n": 1}
    (effect,) = engine.sim.ledger(service="echo", key=step.idempotency_key)
    assert effect["operation"] == "post" and effect["payload"]["path"] == "/echo/hook"
    attempts = TaskExecutionHistory.objects.filter(step=step, kind="attempt").order_by("id")
    assert [a.status for a in attempts] == ["failed_transient", "succeeded"]
    assert "503" in attempts[0].error


def test_http_job__4xx__permanent_failure_without_retry(engine, demo_user):
    base = os.environ["SIMULATOR_URL"]

    run = _http_run(demo_user, f"{base}/echo/hook?status=404")
    run = wait_run(run.id, (Run.State.COMPENSATED, Run.State.FAILED))

    (step,) = run.steps.filter(kind=Step.Kind.FORWARD)
    assert run.state == Run.State.COMPENSATED
    assert step.process_state == Step.State.ERROR and step.error_permanent and step.attempts == 1
    assert "answered 404" in step.last_error
    assert engine.sim.ledger(service="echo") == []

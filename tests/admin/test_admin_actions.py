"""Operator actions: they call the services, and say what happened to each run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from scheduler.models import Run, Step, TaskExecutionHistory
from supervisor.models import Alert
from supervisor.operator import alert_acknowledge

from .factories import order_completed, order_failed, order_pending, order_running

# The tests play the scheduler (see factories.py): no claim inside order_submit.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

RUNS = "/admin/scheduler/run/"


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _action(client: Client, url: str, action: str, ids: list[Any]) -> Any:
    return client.post(url, {"action": action, "_selected_action": [str(i) for i in ids]}, follow=True)


def test_cancel_action__running_and_pending__compensating_and_cancelled(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    pending = order_pending(customer)
    completed = order_completed(customer)

    response = _action(staff_client, RUNS, "cancel_runs", [running.run_id, pending.run_id, completed.run_id])

    assert response.status_code == 200
    run = Run.objects.get(pk=running.run_id)
    # Reserve was done and charge was in flight: both are undone, in reverse order.
    assert run.state == Run.State.COMPENSATING
    assert run.cancel_requested
    comps = list(Step.objects.filter(run_id=run.id, kind=Step.Kind.COMPENSATION).order_by("seq"))
    assert [c.name for c in comps] == ["refund_payment", "release_inventory"]
    assert Run.objects.get(pk=pending.run_id).state == Run.State.CANCELLED  # nothing ran: nothing to undo
    assert Run.objects.get(pk=completed.run_id).state == Run.State.COMPLETED
    texts = _messages(response)
    assert any(t.startswith("Cancelled 2 run(s)") for t in texts), texts
    assert any(str(completed.run_id)[-8:] in t and "only pending or running" in t for t in texts), texts


def test_resume_compensation_action__failed_run__compensating_again(
    staff_client: Client, customer: Any
) -> None:
    failed = order_failed(customer)
    running = order_running(customer)

    response = _action(staff_client, RUNS, "resume_compensation", [failed.run_id, running.run_id])

    run = Run.objects.get(pk=failed.run_id)
    assert run.state == Run.State.COMPENSATING
    release = Step.objects.get(run_id=run.id, name="release_inventory")
    assert release.process_state == Step.State.PENDING
    assert release.failure_count == 0
    audit = TaskExecutionHistory.objects.get(run_id=run.id, kind=TaskExecutionHistory.Kind.OPERATOR)
    assert audit.worker == "admin:ops"
    texts = _messages(response)
    assert any(t.startswith("Resumed compensation of 1 run(s)") for t in texts), texts
    assert any("only failed runs" in t for t in texts), texts
    assert Run.objects.get(pk=running.run_id).state == Run.State.RUNNING


def test_run_detail_buttons__cancel_then_not_offered(staff_client: Client, customer: Any) -> None:
    running = order_running(customer)
    url = reverse("admin:scheduler_run_change", args=[running.run_id])
    assert "Cancel run" in staff_client.get(url).content.decode()

    response = staff_client.post(
        reverse("admin:scheduler_run_operate", args=[running.run_id, "cancel"]), follow=True
    )

    assert response.redirect_chain[-1][0] == url
    assert Run.objects.get(pk=running.run_id).state == Run.State.COMPENSATING
    from django.contrib.admin.models import LogEntry

    entry = LogEntry.objects.get(object_id=str(running.run_id))
    assert entry.user.username == "ops" and "Cancelled" in entry.get_change_message()
    html = response.content.decode()
    assert "Cancelled run" in html
    assert "Cancel run</button>" not in html
    # A second POST (stale page, double click) is refused with a message, not an error page.
    response = staff_client.post(
        reverse("admin:scheduler_run_operate", args=[running.run_id, "cancel"]), follow=True
    )
    assert any("only pending or running" in t for t in _messages(response))


def test_operate_view__get__not_allowed(staff_client: Client, customer: Any) -> None:
    running = order_running(customer)
    response = staff_client.get(reverse("admin:scheduler_run_operate", args=[running.run_id, "cancel"]))
    assert response.status_code == 405
    assert Run.objects.get(pk=running.run_id).state == Run.State.RUNNING


def test_acknowledge_action__open_alerts__acknowledged_by_operator(
    staff_client: Client, operator: Any, customer: Any
) -> None:
    failed, other = order_failed(customer), order_failed(customer)
    # The declined cards raise no alert (a business outcome); the refused releases are one
    # incident - "runs needing an operator" - with both runs linked and counted (issue 21).
    alerts = list(Alert.objects.all())
    assert len(alerts) == 1 and alerts[0].acknowledged_at is None
    assert alerts[0].kind == "run_needs_operator" and alerts[0].count == 2
    assert set(alerts[0].links.values_list("run_id", flat=True)) == {failed.run_id, other.run_id}

    url = reverse("admin:supervisor_alert_changelist")
    response = _action(staff_client, url, "acknowledge", [a.pk for a in alerts])

    assert any("Acknowledged 1 alert(s)" in t for t in _messages(response))
    for alert in Alert.objects.all():
        assert alert.acknowledged_at is not None
        assert alert.acknowledged_by_id == operator.pk
    html = staff_client.get(url, {"status": "open"}).content.decode()
    assert 'name="_selected_action"' not in html


def test_alert_acknowledge__twice__first_operator_kept(operator: Any, customer: Any) -> None:
    from django.contrib.auth import get_user_model

    order_failed(customer)
    ids = list(Alert.objects.values_list("pk", flat=True))
    other = get_user_model().objects.create_user("bob", is_staff=True)
    assert alert_acknowledge(alert_ids=ids, user=operator) == 1
    first = {a.pk: a.acknowledged_at for a in Alert.objects.filter(pk__in=ids)}
    assert alert_acknowledge(alert_ids=ids, user=other) == 0
    for alert in Alert.objects.filter(pk__in=ids):
        assert alert.acknowledged_by_id == operator.pk
        assert alert.acknowledged_at == first[alert.pk]


def test_alert_changelist__open_first(staff_client: Client, operator: Any, customer: Any) -> None:
    old = order_failed(customer)
    older_alert = Alert.objects.get()
    # Resolved an hour ago (past the rule's cooldown), then a newer incident of the rule opens.
    an_hour_ago = timezone.now() - timedelta(hours=1)
    Alert.objects.filter(pk=older_alert.pk).update(
        state="resolved", resolved_at=an_hour_ago, created_at=an_hour_ago
    )
    new = order_failed(customer)
    html = staff_client.get(reverse("admin:supervisor_alert_changelist")).content.decode()
    # The open alert (the newer run) comes before the resolved one (the older run).
    assert Alert.objects.count() == 2
    assert html.index(str(new.run_id)[-8:]) < html.index(str(old.run_id)[-8:])


def test_run_detail__give_up_a_compensating_run__failed_with_the_reason(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    staff_client.post(reverse("admin:scheduler_run_operate", args=[running.run_id, "cancel"]))
    assert Run.objects.get(pk=running.run_id).state == Run.State.COMPENSATING
    page = staff_client.get(reverse("admin:scheduler_run_change", args=[running.run_id])).content.decode()
    assert "Give up (Failed)" in page

    staff_client.post(
        reverse("admin:scheduler_run_operate", args=[running.run_id, "give_up"]),
        {"reason": "refunded by phone"},
    )

    run = Run.objects.get(pk=running.run_id)
    assert run.state == Run.State.FAILED and "refunded by phone" in run.error

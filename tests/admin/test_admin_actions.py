"""Operator actions: they call the services, and say what happened to each run."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from alerting.models import Alert
from alerting.transitions import alert_acknowledge
from ops.models import OperatorAction
from scheduler.models import Run, Step, TaskExecutionHistory

from .factories import order_completed, order_failed, order_pending, order_running

# The tests play the scheduler (see factories.py): no claim inside order_submit.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

RUNS = "/admin/scheduler/run/"


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _action(client: Client, url: str, action: str, ids: list[Any]) -> Any:
    return client.post(url, {"action": action, "_selected_action": [str(i) for i in ids]}, follow=True)


def _confirmed(client: Client, action: str, ids: list[Any], *, reason: str = "customer asked") -> Any:
    """The changelist action: its confirmation page (nothing done yet), then confirmed with a
    reason and each run as the page showed it."""
    page = _action(client, RUNS, action, ids)
    assert page.status_code == 200 and 'id="runs-action-form"' in page.content.decode()
    data: dict[str, Any] = {
        "action": action,
        "_selected_action": [str(i) for i in ids],
        "confirm": "yes",
        "reason": reason,
    }
    for run, seen in page.context["runs"]:
        data[f"seen-{run.pk}"] = seen
    return client.post(RUNS, data, follow=True)


def test_cancel_action__confirm_with_reason__running_and_pending_cancelled_each_audited(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    pending = order_pending(customer)
    completed = order_completed(customer)
    ids = [running.run_id, pending.run_id, completed.run_id]
    before = {r.pk: r.updated_at for r in Run.objects.all()}

    # The action asks first: the page lists the runs, and nothing is done.
    asked = _action(staff_client, RUNS, "cancel_runs", ids)
    assert asked.status_code == 200 and "Cancel the run: 3 run(s)" in asked.content.decode()
    assert {r.pk: r.updated_at for r in Run.objects.all()} == before
    # Confirmed without a reason: refused, nothing done.
    no_reason = staff_client.post(
        RUNS, {"action": "cancel_runs", "_selected_action": [str(i) for i in ids], "confirm": "yes"}
    )
    assert no_reason.status_code == 400 and "say why" in no_reason.content.decode()
    assert {r.pk: r.updated_at for r in Run.objects.all()} == before

    response = _confirmed(staff_client, "cancel_runs", ids)

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
    assert any(t.startswith("Cancel the run: 2 run(s)") for t in texts), texts
    assert any(str(completed.run_id)[-8:] in t and "only pending or running" in t for t in texts), texts
    audit = {(a.run_id, a.action, a.actor_name, a.reason) for a in OperatorAction.objects.all()}
    assert audit == {
        (running.run_id, "cancel_run", "admin:ops", "customer asked"),
        (pending.run_id, "cancel_run", "admin:ops", "customer asked"),
    }
    page = staff_client.get(reverse("admin:scheduler_run_change", args=[running.run_id])).content.decode()
    assert 'data-action="cancel_run"' in page and "customer asked" in page


def test_cancel_action__run_changed_since_the_page__refused_as_stale(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    page = _action(staff_client, RUNS, "cancel_runs", [running.run_id])
    ((_, seen),) = page.context["runs"]
    Run.objects.filter(pk=running.run_id).update(updated_at=timezone.now())  # a reply, the sweep...
    response = staff_client.post(
        RUNS,
        {
            "action": "cancel_runs",
            "_selected_action": [str(running.run_id)],
            "confirm": "yes",
            "reason": "customer asked",
            f"seen-{running.run_id}": seen,
        },
        follow=True,
    )
    assert any("changed since the page was shown" in t for t in _messages(response))
    assert Run.objects.get(pk=running.run_id).state == Run.State.RUNNING
    assert not OperatorAction.objects.exists()


def test_resume_compensation_action__failed_run__compensating_again_audited(
    staff_client: Client, customer: Any
) -> None:
    failed = order_failed(customer)
    running = order_running(customer)

    response = _confirmed(
        staff_client, "resume_compensation", [failed.run_id, running.run_id], reason="inventory is back"
    )

    run = Run.objects.get(pk=failed.run_id)
    assert run.state == Run.State.COMPENSATING
    release = Step.objects.get(run_id=run.id, name="release_inventory")
    assert release.process_state == Step.State.PENDING
    assert release.failure_count == 0
    history = TaskExecutionHistory.objects.get(run_id=run.id, kind=TaskExecutionHistory.Kind.OPERATOR)
    assert history.worker == "admin:ops"
    texts = _messages(response)
    assert any(t.startswith("Resume compensation: 1 run(s)") for t in texts), texts
    assert any("only failed runs" in t for t in texts), texts
    assert Run.objects.get(pk=running.run_id).state == Run.State.RUNNING
    (entry,) = OperatorAction.objects.all()
    assert (entry.run_id, entry.action, entry.reason) == (
        failed.run_id,
        "resume_compensation",
        "inventory is back",
    )


def test_run_detail__cancel__confirmation_page_reason_audit_then_not_offered(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    url = reverse("admin:scheduler_run_change", args=[running.run_id])
    cancel = reverse("admin:scheduler_run_act", args=[running.run_id, "cancel"])
    assert f'href="{cancel}"' in staff_client.get(url).content.decode()

    confirm = staff_client.get(cancel)
    assert confirm.status_code == 200 and 'id="operator-form"' in confirm.content.decode()
    seen = confirm.context["seen"]
    assert Run.objects.get(pk=running.run_id).state == Run.State.RUNNING  # asking did nothing
    no_reason = staff_client.post(cancel, {"seen": seen, "reason": "  "})
    assert no_reason.status_code == 400 and Run.objects.get(pk=running.run_id).state == Run.State.RUNNING

    response = staff_client.post(cancel, {"seen": seen, "reason": "duplicate order"}, follow=True)

    assert response.redirect_chain[-1][0] == url
    assert Run.objects.get(pk=running.run_id).state == Run.State.COMPENSATING
    (entry,) = OperatorAction.objects.all()
    assert (entry.action, entry.actor_name, entry.reason) == ("cancel_run", "admin:ops", "duplicate order")
    html = response.content.decode()
    assert 'data-action="cancel_run"' in html and "duplicate order" in html
    assert f'href="{cancel}"' not in html
    # The same form again (stale page, double click): refused, nothing written.
    again = staff_client.post(cancel, {"seen": seen, "reason": "duplicate order"})
    assert again.status_code == 409 and OperatorAction.objects.count() == 1


def test_operate_view__get_not_allowed__post_without_reason_refused(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    old = reverse("admin:scheduler_run_operate", args=[running.run_id, "cancel"])
    assert staff_client.get(old).status_code == 405
    # The scheduler admin's direct POST goes through the audited action: no reason, no cancel.
    assert staff_client.post(old).status_code == 400
    assert Run.objects.get(pk=running.run_id).state == Run.State.RUNNING
    assert not OperatorAction.objects.exists()


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

    url = reverse("admin:alerting_alert_changelist")
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
    html = staff_client.get(reverse("admin:alerting_alert_changelist")).content.decode()
    # The open alert (the newer run) comes before the resolved one (the older run).
    assert Alert.objects.count() == 2
    assert html.index(str(new.run_id)[-8:]) < html.index(str(old.run_id)[-8:])


def test_run_detail__give_up_a_compensating_run__failed_with_the_reason_audited(
    staff_client: Client, customer: Any
) -> None:
    running = order_running(customer)
    cancel = reverse("admin:scheduler_run_act", args=[running.run_id, "cancel"])
    seen = Run.objects.get(pk=running.run_id).updated_at.isoformat()
    staff_client.post(cancel, {"seen": seen, "reason": "duplicate"})
    run = Run.objects.get(pk=running.run_id)
    assert run.state == Run.State.COMPENSATING
    page = staff_client.get(reverse("admin:scheduler_run_change", args=[running.run_id])).content.decode()
    assert "Give up (Failed)" in page
    give_up = reverse("admin:scheduler_run_act", args=[running.run_id, "give_up"])
    # Wrong state is refused: resume applies to a Failed run only.
    resume = reverse("admin:scheduler_run_act", args=[running.run_id, "resume"])
    wrong = staff_client.post(resume, {"seen": run.updated_at.isoformat(), "reason": "try again"})
    assert wrong.status_code == 409 and "only failed runs" in wrong.content.decode()

    staff_client.post(give_up, {"seen": run.updated_at.isoformat(), "reason": "refunded by phone"})

    run = Run.objects.get(pk=running.run_id)
    assert run.state == Run.State.FAILED and "refunded by phone" in run.error
    actions = list(OperatorAction.objects.order_by("id").values_list("action", "reason"))
    assert actions == [("cancel_run", "duplicate"), ("give_up_run", "refunded by phone")]

"""Every admin action asks a permission the read-only role lacks (issue 26).

An action with no `permissions=` is offered to anyone who may view the changelist: a read-only
operator could send every tenant's given-up webhook deliveries again, or enable, disable and
run every periodic task. The audit walks every ModelAdmin the site registers (ours and
django-celery-beat's) and asks which actions each role is offered."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.test import Client, RequestFactory

from orders.services import order_submit
from scheduler.services import step_claim_due, step_reply
from tests.roles import ROLES, client_of, staff_in
from webhooks.models import WebhookDelivery

from ..orders.conftest import ORDER

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

DELIVERIES = "/admin/webhooks/webhookdelivery/"


def _offered(user: Any) -> dict[str, list[str]]:
    """Model label -> the actions its changelist offers `user` (those it may view only)."""
    request = RequestFactory().get("/admin/")
    request.user = user
    offered: dict[str, list[str]] = {}
    for model, model_admin in admin.site._registry.items():
        if model_admin.has_view_or_change_permission(request):
            actions = sorted(model_admin.get_actions(request))
            if actions:
                offered[model._meta.label] = actions
    return offered


@pytest.mark.parametrize("role", ["read_only", "no_group"])
def test_audit__staff_without_a_role_that_acts__offered_no_action_anywhere(role: str) -> None:
    assert _offered(staff_in(f"audit-{role}", ROLES[role])) == {}


def test_audit__operator__offered_the_actions_of_the_role() -> None:
    offered = _offered(staff_in("audit-op", ROLES["operator"]))

    assert offered["webhooks.WebhookDelivery"] == ["retry_given_up"]
    assert offered["scheduler.Run"] == ["cancel_runs", "resume_compensation"]
    assert offered["django_celery_beat.PeriodicTask"] == [
        "disable_tasks",
        "enable_tasks",
        "run_tasks",
        "toggle_tasks",
    ]


def _given_up(owner: Any) -> WebhookDelivery:
    order_submit(owner_id=owner.id, data=ORDER, callback_url="http://127.0.0.1:9/hooks")
    delivery = WebhookDelivery.objects.get()
    assert delivery.delivery_run_id is not None
    (claim,) = step_claim_due(instance="test", limit=1, run_id=delivery.delivery_run_id)
    step_reply(
        step_id=claim.step_id, lease=claim.lease, outcome="permanent", error="410 gone", claim_next=False
    )
    delivery.refresh_from_db()
    assert delivery.state == WebhookDelivery.State.GIVEN_UP
    return delivery


def _retry(client: Client, delivery: WebhookDelivery) -> Any:
    return client.post(DELIVERIES, {"action": "retry_given_up", "_selected_action": [str(delivery.pk)]})


@pytest.mark.parametrize("role", ["read_only", "no_group"])
def test_webhook_retry_action__without_staff_work__refused_delivery_stays_given_up(
    customer: Any, role: str
) -> None:
    delivery = _given_up(customer)
    viewer = client_of(staff_in(f"retry-{role}", ROLES[role]))

    page = viewer.get(DELIVERIES)
    response = _retry(viewer, delivery)

    if role == "read_only":
        assert page.status_code == 200 and "retry_given_up" not in page.content.decode()
        assert response.status_code == 200  # the changelist again: "No action selected"
    else:
        assert page.status_code == 403 and response.status_code == 403
    delivery.refresh_from_db()
    assert delivery.state == WebhookDelivery.State.GIVEN_UP


def test_webhook_retry_action__operator__sent_again(customer: Any) -> None:
    delivery = _given_up(customer)
    operator = client_of(staff_in("retry-op", ROLES["operator"]))

    response = _retry(operator, delivery)

    assert response.status_code == 302
    delivery.refresh_from_db()
    assert delivery.state == WebhookDelivery.State.DELIVERING

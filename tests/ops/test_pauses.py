"""Pausing a customer or a workflow from the admin (issue 30): audited, the operator's permission,
bad input refused with nothing written."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from ops.models import OperatorAction
from scheduler.models import Pause
from tests.roles import OPERATOR_GROUP, READ_ONLY_GROUP, client_of, staff_in

pytestmark = pytest.mark.django_db


def _add(client, **data):
    return client.post(reverse("admin:scheduler_pause_add"), {"workflow": "", "owner": "", **data})


def test_pause_and_resume_a_customer__audited_with_who_and_why():
    op = staff_in("pause-op", OPERATOR_GROUP)
    customer = get_user_model().objects.create_user("pause-customer")
    client = client_of(op)

    response = _add(client, scope="owner", owner=customer.pk, reason="invoice unpaid")

    assert response.status_code == 302
    pause = Pause.objects.get(owner=customer)
    assert (pause.owner_id, pause.reason, pause.paused_by) == (
        customer.pk,
        "invoice unpaid",
        "admin:pause-op",
    )
    entry = OperatorAction.objects.get(action="pause", actor_name="admin:pause-op")
    assert (entry.actor_name, entry.reason, entry.target) == (
        "admin:pause-op",
        "invoice unpaid",
        f"owner:{customer.pk}",
    )

    url = reverse("admin:scheduler_pause_resume", args=[pause.pk])
    assert client.post(url, {"reason": ""}).status_code == 200  # no reason: the form again
    assert Pause.objects.filter(owner=customer).exists()
    assert client.post(url, {"reason": "paid"}).status_code == 302
    assert not Pause.objects.filter(owner=customer).exists()
    resumed = OperatorAction.objects.get(action="resume", actor_name="admin:pause-op")
    assert resumed.reason == "paid" and resumed.detail["paused_seconds"] >= 0


def test_pause__refused_input_and_read_only_role__nothing_written():
    op = staff_in("pause-op2", OPERATOR_GROUP)
    customer = get_user_model().objects.create_user("pause-customer2")
    client = client_of(op)
    # Counted, not "none at all": a live test of the same process commits its own (the table is
    # shared with the committed data of tests that run real workers).
    pauses, actions = Pause.objects.count(), OperatorAction.objects.count()
    _add(client, scope="owner", owner=customer.pk, reason="")
    _add(client, scope="workflow", workflow="no-such-workflow", reason="r")
    _add(client, scope="owner", reason="r")
    assert (Pause.objects.count(), OperatorAction.objects.count()) == (pauses, actions)

    viewer = client_of(staff_in("pause-viewer", READ_ONLY_GROUP))
    assert _add(viewer, scope="owner", owner=customer.pk, reason="r").status_code == 403
    assert (Pause.objects.count(), OperatorAction.objects.count()) == (pauses, actions)

"""A customer sees that their account is paused and why (issue 30): the banner on their pages and
the `account` field of the jobs API's list."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from scheduler.services import pause_create, pause_resume

pytestmark = pytest.mark.django_db


def test_paused_account__banner_and_api_field_say_so_and_why__gone_after_resume():
    customer = get_user_model().objects.create_user("paused-customer")
    client = Client()
    client.force_login(customer)
    api = APIClient()
    api.force_authenticate(customer)
    assert api.get("/api/jobs/").json()["account"]["paused"] is False
    assert b"account-paused" not in client.get("/jobs/").content

    pause = pause_create(owner_id=customer.pk, reason="invoice 42 unpaid", by="admin:op")

    account = api.get("/api/jobs/").json()["account"]
    assert account["paused"] is True and account["paused_reason"] == "invoice 42 unpaid"
    page = client.get("/jobs/").content.decode()
    assert 'id="account-paused"' in page and "invoice 42 unpaid" in page
    other = APIClient()
    other.force_authenticate(get_user_model().objects.create_user("not-paused"))
    assert other.get("/api/jobs/").json()["account"]["paused"] is False

    pause_resume(pause_id=pause.pk)
    assert api.get("/api/jobs/").json()["account"]["paused"] is False

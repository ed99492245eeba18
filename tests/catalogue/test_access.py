"""Repricing the shared catalogue is staff work (issue 18): the /catalogue/ pages refuse a
signed-in customer with a 403 that says why (and start nothing), send a signed-out visitor to
the login page, and serve staff; the service refuses a customer too."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from catalogue.services import catalogue_seed, reprice_submit
from ops.roles import OPERATOR_GROUP
from scheduler.models import Run
from scheduler.workflows import WorkflowNotPermitted
from tests.roles import ROLES, client_of, join_role, staff_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _client(django_user_model: Any, name: str, *, staff: bool) -> tuple[Client, Any]:
    """`staff`: an "Operators" member (staff work); else a customer."""
    user = django_user_model.objects.create(username=name)
    if staff:
        user = join_role(user, OPERATOR_GROUP)
    client = Client()
    client.force_login(user)
    return client, user


def test_pages__customer__403_with_a_message_and_no_run(django_user_model: Any) -> None:
    catalogue_seed(rows=10)
    customer, _ = _client(django_user_model, "cust", staff=False)
    staff, staff_user = _client(django_user_model, "ops", staff=True)
    theirs = reprice_submit(owner_id=staff_user.pk, by_staff=True, percent="1")

    pages = {
        "index": customer.get("/catalogue/"),
        "post": customer.post("/catalogue/", {"percent": "-90"}),
        "detail": customer.get(f"/catalogue/reprices/{theirs.pk}/"),
    }

    for name, response in pages.items():
        assert response.status_code == 403, name
        assert "repricing it is staff work" in response.content.decode(), name
    assert list(Run.objects.values_list("pk", flat=True)) == [theirs.pk]
    # The navigation offers it to staff only.
    assert 'href="/catalogue/"' not in customer.get("/jobs/").content.decode()
    assert 'href="/catalogue/"' in staff.get("/jobs/").content.decode()


def test_pages__signed_out__to_the_login_page(db: None) -> None:
    for url in ("/catalogue/", "/catalogue/reprices/00000000-0000-0000-0000-000000000000/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url


def test_pages__staff__reprice_form_starts_a_run(django_user_model: Any) -> None:
    catalogue_seed(rows=10)
    staff, user = _client(django_user_model, "ops", staff=True)

    page = staff.get("/catalogue/")
    response = staff.post("/catalogue/", {"percent": "5"})

    run = Run.objects.get(owner=user, workflow="catalogue.reprice")
    assert page.status_code == 200
    assert response.status_code == 302 and response["Location"] == f"/catalogue/reprices/{run.pk}/"
    assert staff.get(response["Location"]).status_code == 200


def test_reprice_submit__not_by_staff__refused_nothing_written(django_user_model: Any) -> None:
    user = django_user_model.objects.create(username="cust")

    with pytest.raises(WorkflowNotPermitted) as refused:
        reprice_submit(owner_id=user.pk, by_staff=False, percent="5")

    assert list(refused.value.errors) == ["workflow"]
    assert not Run.objects.exists()


@pytest.mark.parametrize("role", ["read_only", "no_group"])
def test_pages__staff_without_staff_work__403_and_no_run(django_user_model: Any, role: str) -> None:
    """`is_staff` alone (a read-only operator, staff in no group) does not reprice the shared
    catalogue (issue 26): every page 403 with the message, nothing started, no link offered."""
    catalogue_seed(rows=10)
    viewer = client_of(staff_in(f"viewer-{role}", ROLES[role]))
    _operator, operator_user = _client(django_user_model, "ops", staff=True)
    theirs = reprice_submit(owner_id=operator_user.pk, by_staff=True, percent="1")

    pages = {
        "index": viewer.get("/catalogue/"),
        "post": viewer.post("/catalogue/", {"percent": "-90"}),
        "detail": viewer.get(f"/catalogue/reprices/{theirs.pk}/"),
    }

    for name, response in pages.items():
        assert response.status_code == 403, name
        assert "repricing it is staff work" in response.content.decode(), name
    assert list(Run.objects.values_list("pk", flat=True)) == [theirs.pk]
    assert 'href="/catalogue/"' not in viewer.get("/jobs/").content.decode()

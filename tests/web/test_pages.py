"""The order pages through Django's test client (real database, rolled back)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from orders.models import Order
from orders.services import order_cancel, order_submit

from ..orders.conftest import ORDER, make_user

# The test plays the scheduler (claims and replies itself): no claim inside order_submit.
pytestmark = pytest.mark.usefixtures("manual_scheduler")


@pytest.fixture
def signed_in(db: None) -> tuple[Client, Any]:
    user = make_user("page")
    client = Client()
    client.force_login(user)
    return client, user


FORM = {
    "items-TOTAL_FORMS": "2",
    "items-INITIAL_FORMS": "0",
    "items-MIN_NUM_FORMS": "1",
    "items-MAX_NUM_FORMS": "50",
    "items-0-sku": "SKU-1",
    "items-0-quantity": "2",
    "items-1-sku": "SKU-2",
    "items-1-quantity": "1",
    "amount": "25.00",
    "currency": "EUR",
    "card": "tok_ok",
    "callback_url": "",
}


def test_pages__signed_out__redirect_to_login(db: None) -> None:
    for url in ("/", "/orders/new/", f"/orders/{Order().id}/", f"/orders/{Order().id}/status/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/"), url


def test_login_page__renders_form(db: None) -> None:
    response = Client().get("/accounts/login/")

    assert response.status_code == 200
    assert b'name="username"' in response.content and b"csrfmiddlewaretoken" in response.content


def test_place_order__valid_form__order_created_and_redirected_to_status(
    signed_in: tuple[Client, Any],
) -> None:
    client, user = signed_in

    response = client.post("/orders/new/", FORM)

    order = Order.objects.get(owner=user)
    assert response.status_code == 302 and response["Location"] == f"/orders/{order.pk}/"
    assert order.items == [{"sku": "SKU-1", "quantity": 2}, {"sku": "SKU-2", "quantity": 1}]
    assert str(order.amount) == "25.00" and order.currency == "EUR"


def test_place_order__deleted_item_row__not_ordered(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in

    client.post("/orders/new/", {**FORM, "items-1-DELETE": "on"})

    assert Order.objects.get(owner=user).items == [{"sku": "SKU-1", "quantity": 2}]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"amount": "-1"}, "amount", "greater than or equal to 0.01"),
        ({"amount": ""}, "amount", "required"),
        ({"currency": "XYZ"}, "currency", "Select a valid choice"),
        ({"items-0-quantity": "-3"}, "items-0-quantity", "greater than or equal to 1"),
        ({"items-0-sku": ""}, "items-0-sku", "required"),
        ({"callback_url": "ftp://x.example"}, "callback_url", "valid URL"),
    ],
)
def test_place_order__bad_field__error_next_to_it_nothing_written(
    signed_in: tuple[Client, Any], change: dict[str, str], field: str, message: str
) -> None:
    client, _ = signed_in

    response = client.post("/orders/new/", {**FORM, **change})

    assert response.status_code == 200
    html = response.content.decode()
    assert message in html
    # The message sits in the same .field block as the input it is about.
    block = html[html.index(f'id="id_{field}"') :].split('class="field', 1)[0]
    assert message in block
    assert Order.objects.count() == 0


def test_place_order__no_csrf_token__403(db: None) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_user("page"))

    assert client.post("/orders/new/", FORM).status_code == 403
    assert Order.objects.count() == 0


def test_place_order__over_rate__429_page(signed_in: tuple[Client, Any], settings: Any) -> None:
    settings.SAS_SUBMIT_RATE = "2/minute"
    client, user = signed_in

    statuses = [client.post("/orders/new/", FORM).status_code for _ in range(3)]

    assert statuses == [302, 302, 429]
    assert Order.objects.filter(owner=user).count() == 2


def test_order_list__only_own_newest_first_filter_and_pages(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    mine = [order_submit(owner_id=user.id, data=ORDER) for _ in range(22)]
    order_cancel(order=mine[0], actor="test")
    theirs = order_submit(owner_id=make_user("other").id, data=ORDER)

    page1 = client.get("/")
    page2 = client.get("/", {"page": 2})
    cancelled = client.get("/", {"state": "cancelled"})

    ids1 = [str(o.pk) for o in page1.context["page"].object_list]
    ids2 = [str(o.pk) for o in page2.context["page"].object_list]
    assert ids1 + ids2 == [str(o.pk) for o in reversed(mine)]
    assert str(theirs.pk) not in page1.content.decode()
    assert [o.pk for o in cancelled.context["page"].object_list] == [mine[0].pk]
    assert b"Older" in page1.content and b"Newer" in page2.content


def test_order_detail_and_status__own_order__steps_and_events(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    order = order_submit(owner_id=user.id, data=ORDER)

    page = client.get(f"/orders/{order.pk}/")
    status = client.get(f"/orders/{order.pk}/status/").json()

    assert page.status_code == 200 and b"reserve_inventory" in page.content
    assert status["state"] == "pending" and status["terminal"] is False
    assert [s["state_label"] for s in status["steps"]] == ["Pending", "Pending", "Pending"]
    assert [e["type"] for e in status["events"]] == ["received"]


def test_order_pages__another_users_order__404(signed_in: tuple[Client, Any]) -> None:
    client, _ = signed_in
    order = order_submit(owner_id=make_user("other").id, data=ORDER)

    assert client.get(f"/orders/{order.pk}/").status_code == 404
    assert client.get(f"/orders/{order.pk}/status/").status_code == 404
    assert client.post(f"/orders/{order.pk}/cancel/").status_code == 404
    order.run.refresh_from_db()
    assert order.run.state == "pending"


def test_cancel_button__pending_order__cancelled(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    order = order_submit(owner_id=user.id, data=ORDER)

    response = client.post(f"/orders/{order.pk}/cancel/", follow=True)

    order.run.refresh_from_db()
    assert order.run.state == "cancelled"
    assert b"Cancellation requested" in response.content

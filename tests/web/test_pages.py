"""The order pages through Django's test client (real database, rolled back)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from orders.models import Order
from orders.services import order_cancel, order_submit
from scheduler.services import step_claim_due, step_reply

from ..orders.conftest import ORDER, make_user, token_client


def make_superuser() -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("ops-pages", "ops@example.com", None)


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
        ({"amount": "-1"}, "amount", "must be greater than zero"),
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


def test_cancel_button__pending_order__cancelled_in_a_neutral_banner(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    order = order_submit(owner_id=user.id, data=ORDER)

    response = client.post(f"/orders/{order.pk}/cancel/", follow=True)

    order.run.refresh_from_db()
    assert order.run.state == "cancelled"
    html = response.content.decode()
    assert 'class="alert alert-neutral"' in html and "You cancelled this order." in html
    assert "alert-error" not in html and "message-error" not in html  # a cancellation is no error
    assert "cancelled by" not in html  # the engine's note for operators


def test_cancel_button__finished_order__says_why_not(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    order = order_submit(owner_id=user.id, data=ORDER)
    order_cancel(order=order, actor="test")

    html = client.post(f"/orders/{order.pk}/cancel/", follow=True).content.decode()

    assert "This order can no longer be cancelled: it is cancelled." in html


def _play_steps(run_id: Any, outcomes: list[tuple[str, str]]) -> None:
    """Play the scheduler and the agents: claim the run's next step and reply with each outcome."""
    for outcome, error in outcomes:
        claim = step_claim_due(instance="test", limit=1, run_id=run_id)[0]
        step_reply(step_id=claim.step_id, lease=claim.lease, outcome=outcome, error=error, claim_next=False)  # type: ignore[arg-type]


DECLINED = 'payment refused (402): {"error":"card_declined"}'


def test_status_page__banner_follows_the_state(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    placed, declined = (order_submit(owner_id=user.id, data=ORDER) for _ in range(2))

    before = client.get(f"/orders/{placed.pk}/status/").json()["banner"]
    _play_steps(placed.run_id, [("success", "")] * 3)
    after = client.get(f"/orders/{placed.pk}/status/").json()["banner"]
    page = client.get(f"/orders/{placed.pk}/").content.decode()
    _play_steps(declined.run_id, [("success", ""), ("permanent", DECLINED), ("success", "")])
    undone = client.get(f"/orders/{declined.pk}/status/").json()

    assert before == {"tone": "info", "text": "Order placed. It is being processed now."}
    assert after["tone"] == "success" and after["text"].startswith("Your order is complete")
    assert "Order placed" not in page and 'class="alert alert-success"' in page
    assert undone["state"] == "compensated" and undone["banner"] == {
        "tone": "warn",
        "text": "Your order could not be completed. Your card was declined, so no money was taken. "
        "Everything done so far has been undone.",
    }


def test_status_page__remote_error__customer_sentence_raw_error_only_for_the_api(
    signed_in: tuple[Client, Any],
) -> None:
    client, user = signed_in
    order = order_submit(owner_id=user.id, data=ORDER)
    _play_steps(order.run_id, [("success", ""), ("permanent", DECLINED), ("success", "")])

    page = client.get(f"/orders/{order.pk}/").content.decode()
    status = client.get(f"/orders/{order.pk}/status/").content.decode()
    charge = next(s for s in json.loads(status)["steps"] if s["name"] == "charge_payment")
    api = token_client(user).get(f"/api/orders/{order.pk}/").json()
    api_charge = next(s for s in api["steps"] if s["name"] == "charge_payment")

    # The timeline's SVG coordinates may contain "402": look at its hover texts instead.
    titles = " ".join(re.findall(r"<title>(.*?)</title>", page, flags=re.S))
    page_without_svg = re.sub(r"<svg.*?</svg>", "", page, flags=re.S)
    uuid_or_time = re.compile(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d{4}-\d\d-\d\dT[\d:.+]+"
    )
    for customer_view in (page_without_svg, status, titles):
        assert "card_declined" not in customer_view
        # "402" may occur inside ids and timestamps by chance; never as the service's status.
        assert "402" not in uuid_or_time.sub("", customer_view)
    assert "card_declined" not in page
    assert [a["reason"] for a in charge["attempt_history"]] == [
        "Your card was declined, so no money was taken."
    ]
    assert "Attempt 1</span> Your card was declined" in page
    assert api_charge["attempt_history"][0]["error"] == DECLINED  # kept for whoever operates
    assert api_charge["attempt_history"][0]["reason"] == "Your card was declined, so no money was taken."


def test_status_page__step_labels_and_progress(signed_in: tuple[Client, Any]) -> None:
    client, user = signed_in
    order = order_submit(owner_id=user.id, data=ORDER)
    _play_steps(order.run_id, [("success", "")])

    page = client.get(f"/orders/{order.pk}/").content.decode()
    status = client.get(f"/orders/{order.pk}/status/").json()

    assert [s["label"] for s in status["steps"]] == [
        "Reserve the items",
        "Charge the card",
        "Create the shipment",
    ]
    assert status["progress"] == {"done": 1, "total": 3, "undone": 0, "to_undo": 0}
    assert "1 of 3 steps done" in page and 'aria-valuenow="1"' in page
    cells = re.findall(r'<tr data-step="[a-z_]+"[^>]*>\s*<td>([^<]*)</td>', page)
    assert [c.strip() for c in cells] == ["Reserve the items", "Charge the card", "Create the shipment"]
    assert [e["step_label"] for e in status["events"] if e["step_label"]] == ["Reserve the items"]


def _item_form(**rows: str) -> dict[str, str]:
    data = {k: v for k, v in FORM.items() if not k.startswith("items-")}
    return {
        **data,
        "items-INITIAL_FORMS": "0",
        "items-MIN_NUM_FORMS": "1",
        "items-MAX_NUM_FORMS": "50",
        **rows,
    }


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        pytest.param(
            {"items-TOTAL_FORMS": "1", "items-0-sku": "", "items-0-quantity": "1"},
            "This field is required.",
            id="empty-row",
        ),
        pytest.param(
            {
                "items-TOTAL_FORMS": "1",
                "items-0-sku": "SKU-1",
                "items-0-quantity": "1",
                "items-0-DELETE": "on",
            },
            "Add at least one item.",
            id="every-row-removed",
        ),
        pytest.param({"items-TOTAL_FORMS": "0"}, "Add at least one item.", id="no-rows"),
    ],
)
def test_place_order__no_item__one_clear_message(
    signed_in: tuple[Client, Any], rows: dict[str, str], message: str
) -> None:
    client, _ = signed_in

    html = client.post("/orders/new/", _item_form(**rows)).content.decode()

    assert html.count(message) == 1, html
    assert "Please submit at least" not in html
    assert Order.objects.count() == 0


def test_favicon__linked_on_every_page_and_served(signed_in: tuple[Client, Any]) -> None:
    client, _ = signed_in
    client.force_login(make_superuser())

    pages = [client.get(url).content.decode() for url in ("/", "/orders/new/", "/admin/")]
    redirect = client.get("/favicon.ico")
    icon = finders.find("orders/favicon.svg")  # what runserver or collectstatic serves there

    assert all('rel="icon" href="/static/orders/favicon.svg"' in html for html in pages)
    assert redirect.status_code == 301 and redirect["Location"] == "/static/orders/favicon.svg"
    assert isinstance(icon, str) and "<svg" in Path(icon).read_text()

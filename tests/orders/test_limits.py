"""Orders at the runs-in-flight quota (issue 18): API and page refuse with a 429 naming the
limit, nothing written; another user is not affected."""

from __future__ import annotations

from typing import Any

from django.test import Client

from orders.models import Order

from .conftest import ORDER, make_user, token_client

FORM = {
    "items-TOTAL_FORMS": "1",
    "items-INITIAL_FORMS": "0",
    "items-MIN_NUM_FORMS": "1",
    "items-MAX_NUM_FORMS": "50",
    "items-0-sku": "SKU-1",
    "items-0-quantity": "2",
    "amount": "25.00",
    "currency": "EUR",
    "card": "tok_ok",
    "callback_url": "",
}


def test_api_and_page__at_the_runs_in_flight_quota__429_naming_it(settings: Any, db: None) -> None:
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "RUNS_IN_FLIGHT": 2}
    me, someone = make_user("quota"), make_user("quota")
    api = token_client(me)
    web = Client()
    web.force_login(me)
    assert [api.post("/api/orders/", ORDER, format="json").status_code for _ in range(2)] == [201, 201]

    by_api = api.post("/api/orders/", ORDER, format="json")
    by_page = web.post("/orders/new/", FORM)
    other = token_client(someone).post("/api/orders/", ORDER, format="json")

    assert by_api.status_code == 429
    assert by_api.json()["detail"] == (
        "You have 2 runs in flight (pending or running); the limit is 2 per user. Wait for some to finish."
    )
    assert by_page.status_code == 429 and "the limit is 2 per user" in by_page.content.decode()
    assert other.status_code == 201
    assert Order.objects.filter(owner=me).count() == 2

"""The order rules are written once (orders/workflows.py) and the form, the API and the service
agree on them: the same input is accepted by all three or refused by all three, with the same
message, and nothing is written for a refusal."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from orders.forms import OrderForm
from orders.models import Order
from orders.services import order_submit
from scheduler.workflows import WorkflowInputError

from .conftest import ORDER

URL = "/api/orders/"

pytestmark = pytest.mark.usefixtures("manual_scheduler")

# (amount, currency, the message if refused, or None, and the amount stored if accepted)
CASES = [
    pytest.param("1500", "JPY", None, "1500", id="whole-yen"),
    pytest.param("1500.00", "JPY", None, "1500", id="whole-yen-written-with-zero-decimals"),
    pytest.param("25.5", "EUR", None, "25.50", id="euro-cents"),
    pytest.param("1.50", "JPY", "JPY has no minor unit", None, id="half-a-yen"),
    pytest.param("100.5", "KRW", "KRW has no minor unit", None, id="half-a-won"),
    pytest.param("1.234", "EUR", "at most 2 decimal places for EUR", None, id="euro-three-decimals"),
    pytest.param("1e3", "EUR", "without an exponent", None, id="exponent"),
    pytest.param("2.5E2", "USD", "without an exponent", None, id="exponent-upper-case"),
    pytest.param("NaN", "EUR", "must be a decimal number", None, id="nan"),
    pytest.param("0", "EUR", "must be greater than zero", None, id="zero"),
]


def _api(api: APIClient, amount: str, currency: str) -> tuple[list[str] | None, str | None]:
    response = api.post(URL, {**ORDER, "amount": amount, "currency": currency}, format="json")
    if response.status_code == 201:
        return None, response.json()["amount"]
    assert response.status_code == 400, response.content
    return response.json()["amount"], None


def _form(amount: str, currency: str) -> tuple[list[str] | None, str | None]:
    form = OrderForm({"amount": amount, "currency": currency, "card": "tok_ok", "callback_url": ""})
    if form.is_valid():
        return None, str(form.cleaned_data["amount"])
    return [str(e) for e in form.errors["amount"]], None


def _service(user: Any, amount: str, currency: str) -> tuple[list[str] | None, str | None]:
    try:
        order = order_submit(owner_id=user.id, data={**ORDER, "amount": amount, "currency": currency})
    except WorkflowInputError as exc:
        return exc.errors["amount"], None
    return None, order.amount_display


@pytest.mark.parametrize(("amount", "currency", "refused", "stored"), CASES)
def test_amount__form_api_and_service__agree(
    api: APIClient, user: Any, amount: str, currency: str, refused: str | None, stored: str | None
) -> None:
    results = {
        "api": _api(api, amount, currency),
        "form": _form(amount, currency),
        "service": _service(user, amount, currency),
    }

    for where, (errors, accepted) in results.items():
        if refused is None:
            assert errors is None and accepted == stored, (where, errors, accepted)
        else:
            assert errors is not None and len(errors) == 1 and refused in errors[0], (where, errors)
    messages = {tuple(errors or ()) for errors, _ in results.values()}
    assert len(messages) == 1, messages  # the same words everywhere
    assert Order.objects.count() == (0 if refused else 2)  # the form writes nothing itself


def test_callback_url__bad__one_message_in_form_and_api(api: APIClient) -> None:
    response = api.post(URL, {**ORDER, "callback_url": "not a url"}, format="json")
    form = OrderForm(
        {"amount": "25.00", "currency": "EUR", "card": "tok_ok", "callback_url": "ftp://example.com/x"}
    )

    assert response.status_code == 400
    assert response.json() == {"callback_url": ["Enter a valid URL."]}
    assert not form.is_valid() and form.errors["callback_url"] == ["Enter a valid URL."]

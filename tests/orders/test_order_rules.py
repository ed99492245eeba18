"""The order rules (orders/workflows.py), checked through the order service on the real database."""

from __future__ import annotations

import pytest

from orders.models import Order
from orders.services import order_submit
from scheduler.models import Run, RunEvent, Step
from scheduler.workflows import WorkflowInputError

pytestmark = pytest.mark.django_db

ORDER_INPUT = {"items": [{"sku": "A", "quantity": 1}], "amount": "10.00", "currency": "EUR"}


@pytest.fixture
def user(django_user_model):
    return django_user_model.objects.create(username="bob")


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({**ORDER_INPUT, "items": []}, "items"),
        ({**ORDER_INPUT, "items": [{"sku": "A", "quantity": -1}]}, "items"),
        ({**ORDER_INPUT, "items": [{"sku": "A", "quantity": "2"}]}, "items"),
        ({**ORDER_INPUT, "amount": "-5"}, "amount"),
        ({**ORDER_INPUT, "amount": "1.234"}, "amount"),
        ({**ORDER_INPUT, "amount": True}, "amount"),
        ({**ORDER_INPUT, "currency": "XXX"}, "currency"),
        ({"items": ORDER_INPUT["items"], "currency": "EUR"}, "amount"),
        ({**ORDER_INPUT, "surprise": 1}, "non_field_errors"),
    ],
)
def test_order_submit__bad_input__refused_with_field_error_and_nothing_written(user, data, field):
    before = (Run.objects.count(), Step.objects.count(), Order.objects.count(), RunEvent.objects.count())

    with pytest.raises(WorkflowInputError) as excinfo:
        order_submit(owner_id=user.id, data=data)

    assert field in excinfo.value.errors
    assert excinfo.value.errors[field][0]
    after = (Run.objects.count(), Step.objects.count(), Order.objects.count(), RunEvent.objects.count())
    assert after == before

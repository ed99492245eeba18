"""The orders JSON API, on the real database (rolled back per test), no workers needed."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from orders.models import Order
from scheduler.models import Run, RunEvent, Step
from scheduler.services import step_claim_due, step_reply
from webhooks.models import WebhookSecret
from webhooks.signing import signature_compute

from .conftest import ORDER, make_user, token_client

URL = "/api/orders/"

# The test plays the scheduler (claims and replies itself): no claim inside order_submit.
pytestmark = pytest.mark.usefixtures("manual_scheduler")


def _counts() -> tuple[int, int, int, int]:
    return (Order.objects.count(), Run.objects.count(), Step.objects.count(), RunEvent.objects.count())


def test_post_order__valid__201_with_id_state_and_url(api: APIClient, user: Any) -> None:
    response = api.post(URL, ORDER, format="json")

    assert response.status_code == 201, response.content
    body = response.json()
    order = Order.objects.get(pk=body["id"])
    assert order.owner == user and order.run.correlation_id == body["id"]
    assert body["state"] == "pending"
    assert body["url"] == f"http://testserver/api/orders/{body['id']}/"
    assert response["Location"] == body["url"]
    assert body["items"] == ORDER["items"] and body["amount"] == "25.00" and body["currency"] == "EUR"


def test_post_order__amount_as_number__accepted_and_normalised(api: APIClient) -> None:
    response = api.post(URL, {**ORDER, "amount": 12.5}, format="json")

    assert response.status_code == 201, response.content
    assert response.json()["amount"] == "12.50"


def test_post_order__no_token__401_and_nothing_written(db: None) -> None:
    before = _counts()

    response = APIClient().post(URL, ORDER, format="json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")
    assert _counts() == before


def test_post_order__bad_token__401(db: None) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")

    assert client.get(URL).status_code == 401


BAD_INPUTS = [
    pytest.param({**ORDER, "items": "SKU-1"}, "items", id="items-not-a-list"),
    pytest.param({**ORDER, "items": []}, "items", id="items-empty"),
    pytest.param({**ORDER, "items": [{"sku": "A", "quantity": -1}]}, "items", id="negative-quantity"),
    pytest.param({**ORDER, "items": [{"sku": "A", "quantity": 0}]}, "items", id="zero-quantity"),
    pytest.param({**ORDER, "items": [{"sku": "A", "quantity": "2"}]}, "items", id="quantity-as-string"),
    pytest.param({**ORDER, "items": [{"sku": "A", "quantity": 1.5}]}, "items", id="quantity-fraction"),
    pytest.param({**ORDER, "items": [{"sku": "A", "quantity": True}]}, "items", id="quantity-bool"),
    pytest.param({**ORDER, "items": [{"quantity": 1}]}, "items", id="sku-missing"),
    pytest.param({**ORDER, "items": [{"sku": "", "quantity": 1}]}, "items", id="sku-blank"),
    # A NUL in any string is the JSON parser's refusal (sasproject/json_input.py), before the fields.
    pytest.param({**ORDER, "items": [{"sku": "A\u0000", "quantity": 1}]}, "detail", id="sku-nul"),
    pytest.param({**ORDER, "items": [{"sku": "A", "quantity": 1}] * 51}, "items", id="too-many-items"),
    pytest.param({**ORDER, "amount": "-5"}, "amount", id="negative-amount"),
    pytest.param({**ORDER, "amount": "0"}, "amount", id="zero-amount"),
    pytest.param({**ORDER, "amount": "abc"}, "amount", id="amount-not-a-number"),
    pytest.param({**ORDER, "amount": "1.234"}, "amount", id="amount-three-decimals"),
    pytest.param({**ORDER, "amount": "NaN"}, "amount", id="amount-nan"),
    pytest.param({**ORDER, "amount": "99999999"}, "amount", id="amount-too-large"),
    pytest.param({k: v for k, v in ORDER.items() if k != "amount"}, "amount", id="amount-missing"),
    pytest.param({**ORDER, "currency": "XYZ"}, "currency", id="unknown-currency"),
    pytest.param({**ORDER, "currency": 978}, "currency", id="currency-not-a-string"),
    pytest.param({k: v for k, v in ORDER.items() if k != "currency"}, "currency", id="currency-missing"),
    pytest.param({**ORDER, "callback_url": "not a url"}, "callback_url", id="callback-not-a-url"),
    pytest.param({**ORDER, "callback_url": "ftp://example.com/x"}, "callback_url", id="callback-not-http"),
    pytest.param({**ORDER, "priority": 5}, "priority", id="unknown-field"),
]


@pytest.mark.parametrize(("payload", "field"), BAD_INPUTS)
def test_post_order__bad_input__400_with_field_error_and_nothing_written(
    api: APIClient, payload: dict[str, Any], field: str
) -> None:
    before = _counts()

    response = api.post(URL, payload, format="json")

    assert response.status_code == 400, response.content
    errors = response.json()
    assert field in errors, errors
    assert errors[field], errors
    assert _counts() == before


def test_post_order__bad_second_item__errors_keyed_by_position_as_documented(api: APIClient) -> None:
    items = [{"sku": "A", "quantity": 1}, {"sku": "B", "quantity": 0}]

    errors = api.post(URL, {**ORDER, "items": items}, format="json").json()

    assert errors == {"items": {"1": {"quantity": ["Ensure this value is greater than or equal to 1."]}}}
    documented = (Path(__file__).resolve().parents[2] / "docs" / "using" / "api.md").read_text()
    assert '`{"items": {"1": {"quantity": ["…"]}}}`' in documented


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b'{"items": [', id="truncated"),
        pytest.param(b"not json", id="not-json"),
        pytest.param(b'[{"sku": "A"}]', id="array"),
        pytest.param(b"null", id="null"),
        pytest.param(b'"text"', id="string"),
    ],
)
def test_post_order__malformed_json__400_and_nothing_written(api: APIClient, body: bytes) -> None:
    before = _counts()

    response = api.post(URL, body, content_type="application/json")

    assert response.status_code == 400, response.content
    assert response.json()
    assert _counts() == before


def test_post_order__not_json_media_type__415(api: APIClient) -> None:
    response = api.post(URL, "items=1", content_type="application/x-www-form-urlencoded")

    assert response.status_code == 415


def test_post_order__oversized_body__413_and_nothing_written(api: APIClient, settings: Any) -> None:
    before = _counts()
    padding = "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)

    response = api.post(URL, json.dumps({**ORDER, "card": padding}), content_type="application/json")

    assert response.status_code == 413, response.content
    assert "too large" in response.json()["detail"]
    assert _counts() == before


def test_post_order__same_idempotency_key__second_returns_first_order_200(api: APIClient) -> None:
    first = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="key-1")
    second = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="key-1")

    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert Order.objects.count() == 1 and Run.objects.count() == 1


def test_post_order__same_key_equivalent_body__same_order(api: APIClient) -> None:
    first = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="key-eq")
    second = api.post(URL, {**ORDER, "amount": 25}, format="json", HTTP_IDEMPOTENCY_KEY="key-eq")

    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]


def test_post_order__same_key_different_body__422_and_nothing_written(api: APIClient) -> None:
    first = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="key-2")
    before = _counts()

    second = api.post(URL, {**ORDER, "amount": "26.00"}, format="json", HTTP_IDEMPOTENCY_KEY="key-2")

    assert second.status_code == 422, second.content
    assert second.json()["order_id"] == first.json()["id"]
    assert _counts() == before


def test_post_order__same_key_two_users__two_orders(api: APIClient, other_api: APIClient) -> None:
    mine = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    theirs = other_api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="shared")

    assert (mine.status_code, theirs.status_code) == (201, 201)
    assert mine.json()["id"] != theirs.json()["id"]


def test_post_order__idempotency_key_too_long__400(api: APIClient) -> None:
    response = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="k" * 256)

    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()
    assert Order.objects.count() == 0


def test_post_order__bad_input_with_idempotency_key__400_key_still_usable(api: APIClient) -> None:
    bad = api.post(URL, {**ORDER, "currency": "XYZ"}, format="json", HTTP_IDEMPOTENCY_KEY="key-3")
    good = api.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="key-3")

    assert (bad.status_code, good.status_code) == (400, 201)


def test_get_order__detail__state_steps_and_event_log(api: APIClient) -> None:
    order_id = api.post(URL, ORDER, format="json").json()["id"]

    body = api.get(f"{URL}{order_id}/").json()

    assert body["id"] == order_id and body["state"] == "pending" and body["cancellable"] is True
    assert [s["name"] for s in body["steps"]] == ["reserve_inventory", "charge_payment", "create_shipment"]
    assert set(body["steps"][0]) >= {
        "name",
        "state",
        "failure_count",
        "complete_by",
        "last_error",
        "attempts",
    }
    assert [s["state"] for s in body["steps"]] == ["pending", "waiting", "waiting"]
    assert [e["type"] for e in body["events"]] == ["received"]
    assert body["events"][0]["event_id"]


def test_get_order__after_claim_and_reply__steps_show_progress(api: APIClient) -> None:
    order_id = api.post(URL, ORDER, format="json").json()["id"]
    claim = step_claim_due(instance="test", limit=10, run_id=Order.objects.get(pk=order_id).run_id)[0]
    step_reply(
        step_id=claim.step_id, lease=claim.lease, outcome="success", result={"ok": True}, claim_next=False
    )

    body = api.get(f"{URL}{order_id}/").json()

    assert body["state"] == "running"
    assert [(s["name"], s["state"], s["attempts"]) for s in body["steps"]][:2] == [
        ("reserve_inventory", "processed", 1),
        ("charge_payment", "pending", 0),
    ]
    assert [e["type"] for e in body["events"]] == ["received", "started", "step_completed"]


def test_get_order__other_users_order__404_everywhere(api: APIClient, other_api: APIClient) -> None:
    order_id = api.post(URL, ORDER, format="json").json()["id"]

    assert other_api.get(f"{URL}{order_id}/").status_code == 404
    assert other_api.post(f"{URL}{order_id}/cancel/").status_code == 404
    assert other_api.get(URL).json()["count"] == 0
    assert Run.objects.get(correlation_id=order_id).state == Run.State.PENDING


def test_get_order__malformed_id__404(api: APIClient) -> None:
    assert api.get(f"{URL}not-a-uuid/").status_code == 404


def test_list_orders__only_callers_newest_first_paginated(api: APIClient, other_api: APIClient) -> None:
    ids = [api.post(URL, {**ORDER, "amount": f"{i + 1}.00"}, format="json").json()["id"] for i in range(23)]
    other_api.post(URL, ORDER, format="json")

    page1 = api.get(URL).json()
    page2 = api.get(page1["next"]).json()

    assert page1["count"] == 23
    assert [o["id"] for o in page1["results"]] + [o["id"] for o in page2["results"]] == ids[::-1]
    assert len(page1["results"]) == 20 and page2["next"] is None


def test_list_orders__filter_by_state__only_that_state(api: APIClient) -> None:
    keep = api.post(URL, ORDER, format="json").json()["id"]
    cancel = api.post(URL, ORDER, format="json").json()["id"]
    api.post(f"{URL}{cancel}/cancel/")

    pending = api.get(URL, {"state": "pending"}).json()
    cancelled = api.get(URL, {"state": "cancelled"}).json()

    assert [o["id"] for o in pending["results"]] == [keep]
    assert [o["id"] for o in cancelled["results"]] == [cancel]


def test_list_orders__unknown_state__400(api: APIClient) -> None:
    response = api.get(URL, {"state": "nope\u0000"})

    assert response.status_code == 400
    assert "state" in response.json()


def test_cancel_order__pending__cancelled_with_event(api: APIClient) -> None:
    order_id = api.post(URL, ORDER, format="json").json()["id"]

    response = api.post(f"{URL}{order_id}/cancel/")

    assert response.status_code == 200, response.content
    body = response.json()
    assert body["state"] == "cancelled" and body["cancellable"] is False
    assert [e["type"] for e in body["events"]][-2:] == ["compensating", "cancelled"]
    assert all(s["state"] == "cancelled" for s in body["steps"])


def test_cancel_order__a_step_completed__its_compensation_is_scheduled(api: APIClient) -> None:
    order_id = api.post(URL, ORDER, format="json").json()["id"]
    run_id = Order.objects.get(pk=order_id).run_id
    claim = step_claim_due(instance="test", limit=10, run_id=run_id)[0]
    step_reply(
        step_id=claim.step_id,
        lease=claim.lease,
        outcome="success",
        result={"reservation_id": "r1"},
        claim_next=False,
    )

    body = api.post(f"{URL}{order_id}/cancel/").json()

    assert body["state"] == "compensating"
    steps = {s["name"]: s for s in body["steps"]}
    assert steps["reserve_inventory"]["state"] == "compensating"
    assert (
        steps["release_inventory"]["state"] == "pending"
        and steps["release_inventory"]["kind"] == "compensation"
    )
    assert steps["charge_payment"]["state"] == "cancelled"


def test_cancel_order__already_finished__409(api: APIClient) -> None:
    order_id = api.post(URL, ORDER, format="json").json()["id"]
    api.post(f"{URL}{order_id}/cancel/")

    response = api.post(f"{URL}{order_id}/cancel/")

    assert response.status_code == 409
    assert "cancelled" in response.json()["detail"].lower()


def test_post_order__over_rate__429_then_others_unaffected(settings: Any, db: None) -> None:
    settings.SAS_SUBMIT_RATE = "3/minute"
    me, someone = token_client(make_user("rl")), token_client(make_user("rl"))

    statuses = [me.post(URL, ORDER, format="json").status_code for _ in range(5)]
    other = someone.post(URL, ORDER, format="json")

    assert statuses == [201, 201, 201, 429, 429]
    assert int(me.post(URL, ORDER, format="json")["Retry-After"]) > 0
    assert other.status_code == 201
    assert me.get(URL).status_code == 200  # reads are not throttled
    assert Order.objects.count() == 4


def test_create_api_token__prints_the_key_once__rotate_replaces_it(user: Any) -> None:
    from django.core.management.base import CommandError

    out = StringIO()
    call_command("create_api_token", user.username, stdout=out)
    key = out.getvalue().strip()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert len(key) == 40 and client.get(URL).status_code == 200

    # Stored hashed: it cannot be printed again; the command says so and changes nothing.
    with pytest.raises(CommandError, match=f"has a token already \\({key[:8]}…"):
        call_command("create_api_token", user.username, stdout=StringIO())
    assert client.get(URL).status_code == 200

    rotated = StringIO()
    call_command("create_api_token", user.username, "--rotate", stdout=rotated)
    new = APIClient()
    new.credentials(HTTP_AUTHORIZATION=f"Token {rotated.getvalue().strip()}")
    assert new.get(URL).status_code == 200 and client.get(URL).status_code == 401


def test_create_api_token__unknown_user__error(db: None) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no user"):
        call_command("create_api_token", "nobody-here", stdout=StringIO())


def test_create_user__password_from_stdin__signs_in_and_gets_an_api_token(db: None) -> None:
    from django.test import Client

    out = StringIO()
    call_command("create_user", "carol", "--password-stdin", stdin=StringIO("pw-for-carol-1\n"), stdout=out)
    token = StringIO()
    call_command("create_api_token", "carol", stdout=token)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.getvalue().strip()}")

    assert "user 'carol' created" in out.getvalue()
    assert client.post(URL, ORDER, format="json").status_code == 201
    assert Client().login(username="carol", password="pw-for-carol-1")


def test_create_user__no_password__api_only(db: None) -> None:
    from django.contrib.auth import get_user_model

    call_command("create_user", "dave", "--no-password", stdout=StringIO())

    assert not get_user_model().objects.get(username="dave").has_usable_password()


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        pytest.param(["alice0"], "", "already exists", id="existing-user"),
        pytest.param(["erin", "--password-stdin"], "short\n", "password refused", id="weak-password"),
        pytest.param(["erin", "--password-stdin"], "", "no password on stdin", id="empty-stdin"),
        pytest.param(["erin"], "", "no terminal", id="no-terminal-to-ask"),
    ],
)
def test_create_user__refused__clear_error_and_nothing_created(
    db: None, args: list[str], stdin: str, message: str
) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management.base import CommandError

    make_user("alice")  # alice0 (the counter is per session: look it up)
    existing = get_user_model().objects.filter(username__startswith="alice").first()
    assert existing is not None
    args = [existing.username if a == "alice0" else a for a in args]
    before = get_user_model().objects.count()

    with pytest.raises(CommandError, match=message):
        call_command("create_user", *args, stdin=StringIO(stdin), stdout=StringIO())

    assert get_user_model().objects.count() == before


def test_schema__served_without_auth__documents_the_endpoints(db: None) -> None:
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    schema = json.loads(response.content)
    assert schema["openapi"].startswith("3.")
    assert {"/api/orders/", "/api/orders/{id}/", "/api/orders/{id}/cancel/"} <= set(schema["paths"])
    assert "tokenAuth" in schema["components"]["securitySchemes"]
    create = schema["paths"]["/api/orders/"]["post"]
    assert {"201", "200", "400", "422", "429"} <= set(create["responses"])


def test_webhook_secret__get_then_rotate__signs_with_the_new_one(api: APIClient, user: Any) -> None:
    first = api.get("/api/webhook-secret/").json()
    rotated = api.post("/api/webhook-secret/rotate/").json()

    assert first["secret"] != rotated["secret"] and len(rotated["secret"]) == 64
    assert WebhookSecret.objects.get(user=user).secret == rotated["secret"]
    assert signature_compute(secret=rotated["secret"], body=b"{}", timestamp=1).startswith("t=1,v1=")

"""A customer's alert webhook URL: the rules the form states are the rules enforced (https, a
public address), and a refusal says what to change in the customer's terms, never an
operator's setting (issue 28, item 5). The same customer wording for order callbacks and
`http.call` URLs, which pass the same egress checks.

The tests' environment lets 127.0.0.1 be a private callback host (tests/envsetup.py), as an
operator would for a test or development receiver: only such a host may take http://.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agents.http_call import validate_http_call_input
from alerting.models import AlertRule
from orders.workflows import callback_url_validator
from scheduler.workflows import WorkflowInputError
from webhooks.destinations import HTTPS_REQUIRED

from ..orders.conftest import token_client
from .conftest import job, user

pytestmark = pytest.mark.usefixtures("no_rules")

RULE_FORM = {
    "kind": "job_consecutive_failures",
    "threshold": "2",
    "min_runs": "1",
    "window_minutes": "60",
    "notify_email": "on",
    "name": "two in a row",
}
# Words that belong to the operator's configuration, not to a customer's page.
OPERATOR_WORDS = ("SAS_", "setting", "allowlist", "deny list", "allow it in")


def _api(owner: Any, url: str) -> Any:
    body = {"job": job(owner).pk, "kind": "job_consecutive_failures", "threshold": 3, "webhook_url": url}
    return token_client(owner).post("/api/alert-rules/", body, format="json")


def _form(owner: Any, url: str) -> Any:
    client = Client()
    client.force_login(owner)
    return client.post(
        reverse("jobs:alert_rule_create", args=[job(owner).pk]), {**RULE_FORM, "webhook_url": url}
    )


def test_http_webhook__refused_on_the_api_and_the_form__use_https__nothing_written() -> None:
    alice = user("alice")

    api = _api(alice, "http://alerts.example.com/hook")
    form = _form(alice, "http://alerts.example.com/hook")

    assert api.status_code == 400 and api.json() == {"webhook_url": [HTTPS_REQUIRED]}
    assert HTTPS_REQUIRED == "Use an https:// address: alerts are only sent over an encrypted connection"
    assert form.status_code == 400
    assert form.context["rule_form"].errors["webhook_url"] == [HTTPS_REQUIRED]
    page = form.content.decode()
    assert "Use an https:// address" in page and 'id="field-webhook_url"' in page
    assert not AlertRule.objects.exists()


def test_https_webhook__accepted__and_http_only_to_a_host_the_operator_made_private() -> None:
    alice = user("alice")

    public = _api(alice, "https://alerts.example.com/hook")
    dev_receiver = _api(alice, "http://127.0.0.1:8099/alerts")  # private host of the test settings

    assert public.status_code == 201, public.json()
    assert dev_receiver.status_code == 201, dev_receiver.json()
    assert sorted(AlertRule.objects.values_list("webhook_url", flat=True)) == [
        "http://127.0.0.1:8099/alerts",
        "https://alerts.example.com/hook",
    ]


def test_form__states_the_rule_it_enforces() -> None:
    alice = user("alice")
    client = Client()
    client.force_login(alice)

    page = client.get(reverse("jobs:detail", args=[job(alice).pk])).content.decode()

    assert "An https:// address on the public internet (other addresses are refused)" in page
    assert "https only" not in page


@pytest.mark.parametrize(
    ("url", "allowed", "message"),
    [
        (
            "https://10.0.0.5/hook",
            "*",
            "10.0.0.5:443 is not a public address: use one reachable from the internet",
        ),
        ("https://localhost/hook", "*", "localhost is a loopback name: use a public host name"),
        (
            "https://other.example.net/hook",
            "*.example.com",
            "other.example.net:443 is not an address this service may call",
        ),
        (
            "https://hooks.example.com/_faults",
            "*",
            "hooks.example.com:443/_faults is reserved by this service",
        ),
    ],
)
def test_refused_webhook_url__in_the_customers_terms__api_and_form(
    settings: Any, url: str, allowed: str, message: str
) -> None:
    settings.SAS_CALLBACK_ALLOWED_HOSTS = [allowed]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = []
    settings.SAS_EGRESS_DENIED = [*settings.SAS_EGRESS_DENIED, "hooks.example.com/_"]
    alice = user("alice")

    api = _api(alice, url)
    form = _form(alice, url)

    assert api.status_code == 400 and form.status_code == 400
    (api_message,) = api.json()["webhook_url"]
    (form_message,) = form.context["rule_form"].errors["webhook_url"]
    assert api_message == form_message
    assert api_message.startswith(message), api_message
    assert not any(word in api_message for word in OPERATOR_WORDS), api_message
    assert not AlertRule.objects.exists()


def test_order_callback_and_http_call_refusals__in_the_customers_terms(settings: Any) -> None:
    settings.SAS_CALLBACK_PRIVATE_HOSTS = []
    with pytest.raises(Exception) as callback:  # noqa: PT011 - Django's ValidationError, checked below
        callback_url_validator("http://10.0.0.5/hook")
    with pytest.raises(WorkflowInputError) as http_call:
        validate_http_call_input({"method": "GET", "url": "https://elsewhere.example.org/"})

    (callback_message,) = callback.value.messages  # type: ignore[attr-defined]
    (url_message,) = http_call.value.errors["url"]
    assert callback_message == (
        "Not an allowed callback URL: 10.0.0.5:80 is not a public address: "
        "use one reachable from the internet."
    )
    assert url_message == "elsewhere.example.org:443 is not an address this service may call"
    for text in (callback_message, url_message):
        assert not any(word in text for word in OPERATOR_WORDS), text

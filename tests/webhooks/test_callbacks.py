"""Order callbacks and http.call jobs under the default egress policy (issue 18): refused at
submit with a 400 naming the field (API, page, service) and nothing written; refused at
delivery if one got in; the webhook breaker keyed per (owner, host). Real database, real
Redis, real sockets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.test import Client

from agents.breaker import CircuitBreaker
from agents.egress import UrlRefused
from agents.faults import PermanentFault, TransientFault
from agents.http_call import HTTP_CALL_WORKFLOW
from orders.models import Order
from sasproject.settings.env import denied_defaults
from scheduler.models import Job, Run
from webhooks.models import WebhookSubscription
from webhooks.services import webhook_subscribe
from webhooks.tasks import webhook_deliver

from ..agents.servers import HostileServer, start_hostile_server
from ..orders.conftest import ORDER, make_user, token_client
from ..web.test_pages import FORM
from .receiver import Receiver

SIM = os.environ["SIMULATOR_URL"]

REFUSED = [
    pytest.param("http://127.0.0.1:6379/", id="loopback-redis"),
    pytest.param("http://localhost:8000/hook", id="loopback-name"),
    pytest.param("http://[::1]:8000/hook", id="loopback-v6"),
    pytest.param("http://10.1.2.3/hook", id="private"),
    pytest.param("http://192.168.0.10/hook", id="private-192"),
    pytest.param("http://169.254.10.10/hook", id="link-local"),
    pytest.param("http://100.64.1.1/hook", id="cgnat"),
    pytest.param("http://169.254.169.254/latest/meta-data/iam/", id="metadata-aws"),
    pytest.param("http://metadata.google.internal/computeMetadata/v1/", id="metadata-gcp"),
    pytest.param(f"{SIM}/payment/refund", id="simulator-payment"),
    pytest.param(f"{SIM}/_faults", id="simulator-faults"),
    pytest.param(f"{SIM}/_ledger", id="simulator-ledger"),
    pytest.param(f"{SIM}/echo/../_faults", id="traversal"),
]


@pytest.fixture
def defaults(settings: Any) -> None:
    """The shipped defaults, not the test suite's (which lets webhooks reach 127.0.0.1)."""
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"{urlsplit(SIM).netloc}/echo"]
    settings.SAS_HTTP_JOB_PRIVATE_HOSTS = [urlsplit(SIM).netloc]
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["*"]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = []
    settings.SAS_EGRESS_DENIED = denied_defaults([SIM])


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_order_api__callback_to_internal_target__400_on_callback_url_nothing_written(
    defaults: None, url: str
) -> None:
    response = token_client(make_user("cb")).post(
        "/api/orders/", {**ORDER, "callback_url": url}, format="json"
    )

    assert response.status_code == 400, response.content
    assert set(response.json()) == {"callback_url"}
    assert "Not an allowed callback URL" in response.json()["callback_url"][0]
    assert (Order.objects.count(), Run.objects.count(), WebhookSubscription.objects.count()) == (0, 0, 0)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        pytest.param("http://127.0.0.1:6379/", id="loopback"),
        pytest.param("http://169.254.169.254/", id="metadata"),
        pytest.param(f"{SIM}/_faults", id="simulator-faults"),
    ],
)
def test_order_page__callback_to_internal_target__form_error_nothing_written(
    defaults: None, url: str
) -> None:
    client = Client()
    client.force_login(make_user("page"))

    response = client.post("/orders/new/", {**FORM, "callback_url": url})

    assert response.status_code == 200
    html = response.content.decode()
    block = html[html.index('id="id_callback_url"') :].split('class="field', 1)[0]
    assert "Not an allowed callback URL" in block
    assert Order.objects.count() == 0


@pytest.mark.django_db
def test_order_api__public_callback__accepted(defaults: None) -> None:
    response = token_client(make_user("cb")).post(
        "/api/orders/", {**ORDER, "callback_url": "https://hooks.example.com/orders"}, format="json"
    )

    assert response.status_code == 201, response.content
    assert WebhookSubscription.objects.get().url == "https://hooks.example.com/orders"


@pytest.mark.django_db
def test_subscribe_service__refused_url__raises_and_nothing_written(defaults: None) -> None:
    with pytest.raises(UrlRefused):
        webhook_subscribe(run_id="0" * 32, owner_id=1, url="http://127.0.0.1:6379/", correlation_id="x")

    assert WebhookSubscription.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("url", REFUSED)
def test_jobs_api__http_call_to_internal_target__400_on_input_url_nothing_written(
    defaults: None, url: str
) -> None:
    body = {
        "name": "probe",
        "workflow": HTTP_CALL_WORKFLOW,
        "input": {"method": "GET", "url": url},
        "cron": "*/5 * * * *",
    }

    response = token_client(make_user("job")).post("/api/jobs/", body, format="json")

    assert response.status_code == 400, response.content
    assert "url" in response.json()["input"], response.json()
    assert (Job.objects.count(), Run.objects.count()) == (0, 0)


@pytest.mark.django_db
def test_jobs_api__http_call_to_simulator_echo__accepted_by_default(defaults: None) -> None:
    body = {
        "name": "echo",
        "workflow": HTTP_CALL_WORKFLOW,
        "input": {"method": "POST", "url": f"{SIM}/echo/hook", "body": {"a": 1}},
        "cron": "*/5 * * * *",
    }

    response = token_client(make_user("job")).post("/api/jobs/", body, format="json")

    assert response.status_code == 201, response.content


# -- at delivery -----------------------------------------------------------------------------


@pytest.fixture
def hostile() -> Iterator[list[HostileServer]]:
    servers: list[HostileServer] = []
    yield servers
    for server in servers:
        server.stop()


@pytest.mark.django_db
def test_delivery__url_got_in_before_the_policy_tightened__refused_nothing_sent(
    settings: Any, receiver: Receiver
) -> None:
    """A subscription accepted while 127.0.0.1 was allowed; the operator removes it: the next
    attempt is refused (permanent: given up), and the receiver sees nothing."""
    owner = make_user("late")
    settings.SAS_CALLBACK_PRIVATE_HOSTS = []
    payload = {"delivery_id": 1, "owner_id": owner.id, "url": receiver.url, "body": "{}", "headers": {}}

    with pytest.raises(PermanentFault, match="not a public address"):
        webhook_deliver.call_remote(path="", payload=payload, idempotency_key="k", timeout=5)

    assert receiver.requests == []


@pytest.mark.django_db
def test_delivery__signed_with_a_fresh_timestamp_verifiable_by_the_helper(receiver: Receiver) -> None:
    from webhooks.services import webhook_secret_get_or_create
    from webhooks.signing import signature_verify

    owner = make_user("sig")
    payload = {"delivery_id": 1, "owner_id": owner.id, "url": receiver.url, "body": '{"a":1}', "headers": {}}

    webhook_deliver.call_remote(path="", payload=payload, idempotency_key="k", timeout=5)

    [request] = receiver.requests
    header = request.headers["X-SAS-Signature"]
    secret = webhook_secret_get_or_create(user_id=owner.id).secret
    timestamp = int(request.headers["X-SAS-Timestamp"])
    assert header.startswith(f"t={timestamp},v1=")
    assert signature_verify(secret=secret, body=request.body, header=header)
    assert not signature_verify(secret=secret, body=request.body, header=header, now=timestamp + 301)


@pytest.mark.django_db
def test_breaker__keyed_per_owner_and_host__one_owners_failures_leave_anothers_closed(
    redis_client: Any, hostile: list[HostileServer]
) -> None:
    """Owner A's endpoint on a shared host answers 500 until A's breaker opens (the agent's own
    calls and breaker, as `perform` drives them); owner B's delivery to the same host still goes
    through its own breaker, closed."""
    server = start_hostile_server("split")
    hostile.append(server)
    owner_a, owner_b = make_user("a"), make_user("b")
    payload_a = {
        "delivery_id": 1,
        "owner_id": owner_a.id,
        "url": server.url("/fail"),
        "body": "{}",
        "headers": {},
    }
    payload_b = {
        "delivery_id": 2,
        "owner_id": owner_b.id,
        "url": server.url("/ok"),
        "body": "{}",
        "headers": {},
    }
    breaker_a = webhook_deliver.breaker(payload_a)
    breaker_b = webhook_deliver.breaker(payload_b)
    assert isinstance(breaker_a, CircuitBreaker) and isinstance(breaker_b, CircuitBreaker)
    breaker_a.reset()
    breaker_b.reset()

    failures = 0
    while breaker_a.allow().allowed and failures < 50:
        with pytest.raises(TransientFault, match="answered 500"):
            webhook_deliver.call_remote(path="", payload=payload_a, idempotency_key="a", timeout=5)
        breaker_a.record_failure()
        failures += 1

    assert breaker_a.snapshot()["state"] == "open" and failures == settings_threshold()
    decision = breaker_b.allow()
    assert decision.allowed and breaker_b.snapshot()["state"] == "closed"
    assert webhook_deliver.call_remote(path="", payload=payload_b, idempotency_key="b", timeout=5) == {
        "status_code": 200
    }
    assert breaker_a.key != breaker_b.key


def settings_threshold() -> int:
    from django.conf import settings

    return int(settings.SAS["BREAKER_FAILURE_THRESHOLD"])

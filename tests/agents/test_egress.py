"""The egress policy (issue 18): defaults, path scoping, the deny list, metadata, DNS answers
that change after submit, redirects, and bounded reads under a total deadline - against real
sockets (tests/agents/servers.py). DNS is the one thing outside the project faked here."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from agents.egress import HTTP_JOB_POLICY, EgressPolicy, UrlRefused, egress_config_errors, path_normalise
from agents.egress_http import egress_request
from agents.faults import PermanentFault, TransientFault
from agents.http_call import http_call, validate_http_call_input
from agents.remote import remote_post
from sasproject.settings.env import denied_defaults
from scheduler.workflows import WorkflowInputError
from webhooks.destinations import CALLBACK_POLICY

from .servers import HostileServer, start_hostile_server

SIM = os.environ["SIMULATOR_URL"]
SIM_NETLOC = urlsplit(SIM).netloc


def _id(value: object) -> str:
    """Test ids without the simulator's port (each xdist worker has its own simulator)."""
    return str(value).replace(SIM, "SIM")


@pytest.fixture
def defaults(settings: Any) -> None:
    """The shipped defaults (sasproject/settings/egress.py), whatever the test suite's environment."""
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"{SIM_NETLOC}/echo"]
    settings.SAS_HTTP_JOB_PRIVATE_HOSTS = [SIM_NETLOC]
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["*"]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = []
    settings.SAS_EGRESS_DENIED = denied_defaults([SIM])


@pytest.fixture
def hostile() -> Iterator[list[HostileServer]]:
    servers: list[HostileServer] = []
    yield servers
    for server in servers:
        server.stop()


def _server(servers: list[HostileServer], mode: str, **options: Any) -> HostileServer:
    server = start_hostile_server(mode, **options)
    servers.append(server)
    return server


BAD_TARGETS = [
    ("http://127.0.0.1:6379/", "not a public address"),  # the local Redis
    ("http://127.0.0.1/", "not a public address"),
    ("http://[::1]:8000/", "not a public address"),
    ("http://10.0.0.5/hook", "not a public address"),
    ("http://192.168.1.10/hook", "not a public address"),
    ("http://100.64.0.1/hook", "not a public address"),  # CGNAT
    ("http://169.254.1.1/hook", "not a public address"),  # link-local
    ("http://[fe80::1]/hook", "not a public address"),
    ("http://224.0.0.1/hook", "not a public address"),  # multicast
    ("http://[::ffff:127.0.0.1]:8000/", "not a public address"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://[fd00:ec2::254]/latest/", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://localhost:8000/hook", "loopback name"),
    (f"{SIM}/payment/charge", "deny list"),
    (f"{SIM}/payment/refund", "deny list"),
    (f"{SIM}/inventory/reserve", "deny list"),
    (f"{SIM}/shipping/ship", "deny list"),
    (f"{SIM}/_faults", "deny list"),
    (f"{SIM}/_ledger", "deny list"),
    (f"{SIM}/_stats", "deny list"),
    (f"{SIM}/_FAULTS", "deny list"),
    (f"{SIM}/%5ffaults", "deny list"),  # an escaped _ is decoded before matching
]


@pytest.mark.parametrize(("url", "reason"), BAD_TARGETS, ids=_id)
def test_callback_policy__default__refuses_internal_targets(defaults: None, url: str, reason: str) -> None:
    with pytest.raises(UrlRefused, match=reason):
        CALLBACK_POLICY.url_check(url)


@pytest.mark.parametrize(("url", "reason"), BAD_TARGETS, ids=_id)
def test_http_job_input__default__refuses_internal_targets(defaults: None, url: str, reason: str) -> None:
    """Every target the callbacks refuse, a job refuses too (most already for not being on its
    allowlist, which is the simulator's /echo only)."""
    with pytest.raises(WorkflowInputError) as caught:
        validate_http_call_input({"method": "GET", "url": url})

    assert "url" in caught.value.errors


def test_policies__default__public_callback_and_simulator_echo_allowed(defaults: None) -> None:
    assert CALLBACK_POLICY.url_check("https://hooks.example.com/orders?x=1").url == (
        "https://hooks.example.com/orders?x=1"
    )
    assert CALLBACK_POLICY.url_check("http://8.8.4.4:8080/h").host == "8.8.4.4"
    assert HTTP_JOB_POLICY.url_check(f"{SIM}/echo").path == "/echo"
    assert HTTP_JOB_POLICY.url_check(f"{SIM}/echo/a/b?q=1").path == "/echo/a/b"
    with pytest.raises(UrlRefused, match="not on the allowlist"):
        HTTP_JOB_POLICY.url_check("https://api.example.com/")


@pytest.mark.parametrize(
    "url",
    [
        f"{SIM}/echoes",
        f"{SIM}/",
        f"{SIM}/health",
        f"{SIM}/Echo",
        f"{SIM}/echo/../_faults",
        f"{SIM}/echo/%2e%2e/_ledger",
        f"{SIM}/echo/%2E%2E/_ledger",
        f"{SIM}/echo/.%2e/payment/refund",
        f"{SIM}/echo/./x",
        f"{SIM}/echo%2f..%2f_faults",
        f"{SIM}/echo%5c..%5c_faults",
        f"{SIM}//_faults",
        f"{SIM}/echo//x",
        f"{SIM}//echo",
    ],
    ids=_id,
)
def test_path_scope__outside_the_prefix_or_traversal__refused(defaults: None, url: str) -> None:
    with pytest.raises(UrlRefused):
        HTTP_JOB_POLICY.url_check(url)


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [("/echo", "/echo"), ("/%65cho/%7Ex", "/echo/~x"), ("/echo/a%20b", "/echo/a%20b"), ("", "/")],
)
def test_path_normalise__unreserved_escapes_decoded(raw: str, normalised: str) -> None:
    assert path_normalise(raw) == normalised


def test_path_scope__escaped_echo__allowed_and_sent_normalised(defaults: None) -> None:
    assert HTTP_JOB_POLICY.url_check(f"{SIM}/%65cho/x").url == f"{SIM}/echo/x"


def test_deny_list__wins_over_an_operator_allow_entry(settings: Any) -> None:
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [SIM_NETLOC]
    settings.SAS_EGRESS_DENIED = denied_defaults([SIM])

    assert HTTP_JOB_POLICY.url_check(f"{SIM}/echo").path == "/echo"
    for path in ("/payment/charge", "/_faults", "/_ledger", "/inventory/reserve", "/shipping/ship"):
        with pytest.raises(UrlRefused, match="deny list"):
            HTTP_JOB_POLICY.url_check(SIM + path)


def test_deny_list__name_resolving_to_the_simulator__refused_at_resolve(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name the operator allowed (even as private) that resolves to the simulator's address
    cannot reach its control paths: the deny list is matched against the resolved address."""
    port = int(SIM_NETLOC.rsplit(":", 1)[1])
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["*"]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = ["hooks.partner.test"]
    settings.SAS_EGRESS_DENIED = denied_defaults([SIM])
    _fake_dns(monkeypatch, {"hooks.partner.test": ["127.0.0.1"]})

    target = CALLBACK_POLICY.url_check(f"http://hooks.partner.test:{port}/_faults")

    with pytest.raises(UrlRefused, match="deny list"):
        CALLBACK_POLICY.addresses_resolve(target)


def test_config_errors__bad_entries__reported_by_the_system_check(settings: Any) -> None:
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["*", "bad host", "x.test/a/../b"]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = ["10.0.0.1/path"]
    settings.SAS_EGRESS_DENIED = ["*.1.2.3.4"]

    errors = egress_config_errors()

    assert any("SAS_CALLBACK_ALLOWED_HOSTS" in e and "bad host" in e for e in errors)
    assert any("SAS_CALLBACK_ALLOWED_HOSTS" in e and ".." in e for e in errors)
    assert any("SAS_CALLBACK_PRIVATE_HOSTS" in e and "no path" in e for e in errors)
    assert any("SAS_EGRESS_DENIED" in e for e in errors)


def test_policy__named__reads_its_own_settings(settings: Any) -> None:
    """Alert webhooks (later) get their own policy by prefix: same rules, own lists."""
    settings.SAS_ALERT_HOOK_ALLOWED_HOSTS = ["alerts.example.com"]
    settings.SAS_ALERT_HOOK_PRIVATE_HOSTS = []
    policy = EgressPolicy(name="alert webhooks", prefix="SAS_ALERT_HOOK")

    assert policy.url_check("https://alerts.example.com/x").host == "alerts.example.com"
    with pytest.raises(UrlRefused, match="SAS_ALERT_HOOK_ALLOWED_HOSTS"):
        policy.url_check("https://other.example.com/x")


# -- at call time ----------------------------------------------------------------------------


def _fake_dns(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[str]]) -> list[str]:
    """getaddrinfo answering from `answers` (mutable: a test may change an answer later);
    returns the list of names looked up."""
    real = socket.getaddrinfo
    looked_up: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host in answers:
            looked_up.append(host)
            family = socket.AF_INET
            return [(family, socket.SOCK_STREAM, 6, "", (a, int(port))) for a in answers[host]]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return looked_up


def test_call__dns_answer_changed_to_loopback_after_submit__refused_and_nothing_sent(
    settings: Any, monkeypatch: pytest.MonkeyPatch, hostile: list[HostileServer]
) -> None:
    """Accepted at submit (a name, public when looked up); at delivery it resolves to loopback:
    refused before any connection (the rebinding case)."""
    server = _server(hostile, "fail")
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["*"]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = []
    answers = {"hooks.customer.test": ["93.184.215.14"]}
    _fake_dns(monkeypatch, answers)
    url = f"http://hooks.customer.test:{server.port}/hook"
    CALLBACK_POLICY.addresses_resolve(CALLBACK_POLICY.url_check(url))  # fine at submit
    answers["hooks.customer.test"] = ["127.0.0.1"]

    with pytest.raises(PermanentFault, match="non-public address"):
        egress_request(
            policy=CALLBACK_POLICY,
            method="POST",
            url=url,
            headers={},
            content=b"{}",
            timeout=5,
            max_bytes=100,
        )

    assert server.paths == []


def test_call__name_resolved_once__connection_pinned_to_the_checked_address(
    settings: Any, monkeypatch: pytest.MonkeyPatch, hostile: list[HostileServer]
) -> None:
    """One lookup per call, and the connection goes to its answer: a resolver that would answer
    differently the second time is never asked again."""
    server = _server(hostile, "fail")
    settings.SAS_CALLBACK_ALLOWED_HOSTS = ["*"]
    settings.SAS_CALLBACK_PRIVATE_HOSTS = ["pinned.test"]
    looked_up = _fake_dns(monkeypatch, {"pinned.test": ["127.0.0.1"]})

    response = egress_request(
        policy=CALLBACK_POLICY,
        method="POST",
        url=f"http://pinned.test:{server.port}/hook",
        headers={},
        content=b"{}",
        timeout=5,
        max_bytes=100,
    )

    assert response.status == 500 and server.paths == ["/hook"]
    assert looked_up == ["pinned.test"]


def test_call__redirect_off_policy__not_followed(settings: Any, hostile: list[HostileServer]) -> None:
    """An allowed URL answering 302 to a control path elsewhere: the job fails permanently with
    the 302, and the redirect's target saw no request."""
    inner = _server(hostile, "fail")
    server = _server(hostile, "redirect", location=inner.url("/_faults"))
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"127.0.0.1:{server.port}/r"]
    payload = validate_http_call_input({"method": "GET", "url": server.url("/r")})

    with pytest.raises(PermanentFault, match="answered 302"):
        http_call(payload=payload, idempotency_key="k-r", timeout=5)

    assert server.paths == ["/r"] and inner.paths == []


def test_call__huge_answer__read_up_to_the_cap_only(settings: Any, hostile: list[HostileServer]) -> None:
    server = _server(hostile, "huge")
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"127.0.0.1:{server.port}/big"]
    settings.SAS_HTTP_JOBS = {**settings.SAS_HTTP_JOBS, "RESPONSE_MAX_BYTES": 1000}
    payload = validate_http_call_input({"method": "GET", "url": server.url("/big")})

    result = http_call(payload=payload, idempotency_key="k-h", timeout=10)

    assert result["body_truncated"] is True and len(result["body"]) == 1000
    server.closed.wait(10)
    # The client hung up at the cap: far from the 400 MB offered (kernel buffers hold a few MB).
    assert server.sent < 16 * 1024 * 1024


@pytest.mark.parametrize("mode", ["drip", "drip_headers"])
def test_call__slow_drip__stopped_at_the_total_deadline(
    settings: Any, hostile: list[HostileServer], mode: str
) -> None:
    """A byte every 50 ms never trips a per-read timeout of 1 s; the total deadline (1 s) stops
    the call - in the body and in the headers. The guard thread's 60 s is a hang detector, not a
    speed test: without a total deadline the call would never end."""
    server = _server(hostile, mode, interval=0.05)
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"127.0.0.1:{server.port}/drip"]
    payload = validate_http_call_input({"method": "GET", "url": server.url("/drip")})
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            http_call(payload=payload, idempotency_key="k-d", timeout=1.0)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(60)

    assert not thread.is_alive(), "the slow drip held the call past its deadline"
    assert len(outcome) == 1 and isinstance(outcome[0], TransientFault), outcome
    assert "timed out" in str(outcome[0])
    # At one byte per 50 ms, 1,000 bytes would be 50 s: the call stopped long before.
    assert server.sent < 1000


def test_call__error_body__excerpt_capped_and_one_line(settings: Any, hostile: list[HostileServer]) -> None:
    server = _server(hostile, "huge", size=5000)
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"127.0.0.1:{server.port}/x"]
    payload = validate_http_call_input({"method": "GET", "url": server.url("/x"), "expected_status": 201})

    with pytest.raises(PermanentFault) as caught:
        http_call(payload=payload, idempotency_key="k-e", timeout=5)

    assert "answered 200" in str(caught.value) and str(caught.value).count("x") <= 210


# -- the order agents' calls to the remote services (a configured, trusted origin) -------------


def test_remote_post__huge_answer__transient_fault_memory_capped(
    settings: Any, hostile: list[HostileServer]
) -> None:
    server = _server(hostile, "huge")
    settings.SAS = {
        **settings.SAS,
        "REMOTE_URLS": {**settings.SAS["REMOTE_URLS"], "payment": server.url("")},
        "REMOTE_RESPONSE_MAX_BYTES": 1000,
    }

    with pytest.raises(TransientFault, match="more than 1000 bytes"):
        remote_post(service="payment", path="/payment/charge", body={}, idempotency_key="k", timeout=10)

    server.closed.wait(10)
    assert server.sent < 16 * 1024 * 1024


def test_remote_post__slow_drip__stopped_at_the_total_deadline(
    settings: Any, hostile: list[HostileServer]
) -> None:
    server = _server(hostile, "drip", interval=0.05)
    settings.SAS = {**settings.SAS, "REMOTE_URLS": {**settings.SAS["REMOTE_URLS"], "payment": server.url("")}}
    outcome: list[BaseException] = []

    def call() -> None:
        try:
            remote_post(service="payment", path="/payment/charge", body={}, idempotency_key="k", timeout=1.0)
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(60)

    assert not thread.is_alive(), "the slow drip held the call past its deadline"
    assert len(outcome) == 1 and isinstance(outcome[0], TransientFault) and "timed out" in str(outcome[0])
    assert server.sent < 1000

"""The `http.call` workflow's input rules: the host allowlist, the private-address rule, and
every other field. Pure validation (no I/O) except the resolve-time check and the last test."""

from __future__ import annotations

import ipaddress
import json
import os
from typing import Any

import pytest

from agents.egress import HTTP_JOB_POLICY, Target, UrlRefused, is_public, pattern_parse
from agents.faults import PermanentFault
from agents.http_call import HTTP_CALL_WORKFLOW, HttpCallAgent, http_call, validate_http_call_input
from scheduler.models import Run
from scheduler.services import run_submit
from scheduler.workflows import WorkflowInputError

ALLOWED = [
    "simulator.test",
    "api.example.com:8443",
    "*.partner.io",
    "203.0.113.7",
    "127.0.0.1:8055",
    "localhost:9000",
]
PRIVATE = ["127.0.0.1:8055", "simulator.test"]


@pytest.fixture(autouse=True)
def _allowlist(settings: Any) -> None:
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = ALLOWED
    settings.SAS_HTTP_JOB_PRIVATE_HOSTS = PRIVATE


@pytest.mark.parametrize(
    ("url", "host", "port"),
    [
        ("http://simulator.test/x", "simulator.test", 80),
        ("https://SIMULATOR.test./x?a=1", "simulator.test", 443),
        ("https://api.example.com:8443/hook", "api.example.com", 8443),
        ("https://a.partner.io/hook", "a.partner.io", 443),
        ("https://b.a.partner.io/", "b.a.partner.io", 443),
        ("http://203.0.113.7/", "203.0.113.7", 80),
        ("http://127.0.0.1:8055/echo", "127.0.0.1", 8055),
    ],
)
def test_url__on_the_allowlist__accepted_and_normalised(url: str, host: str, port: int) -> None:
    target = HTTP_JOB_POLICY.url_check(url)

    assert (target.host, target.port) == (host, port)


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://simulator.evil.com/", "not on the allowlist"),
        ("http://simulator.test.evil.com/", "not on the allowlist"),
        ("http://evilsimulator.test/", "not on the allowlist"),
        ("https://api.example.com/hook", "not on the allowlist"),  # 443, the entry says 8443
        ("https://partner.io/", "not on the allowlist"),  # a wildcard is not its apex
        ("https://evilpartner.io/", "not on the allowlist"),
        ("http://127.0.0.1/", "not on the allowlist"),  # the entry says port 8055
        ("http://127.0.0.2:8055/", "not on the allowlist"),
        ("http://[::1]:8055/", "not on the allowlist"),
        ("http://[::ffff:127.0.0.1]:8055/", "not on the allowlist"),
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://0.0.0.0:8055/", "not on the allowlist"),
        ("http://localhost:8055/", "not on the allowlist"),
        ("http://localhost:9000/", "loopback name"),  # allowed, but not as a private host
        ("http://simulator.test@evil.com/", "user name"),
        ("http://evil.com@simulator.test/", "user name"),
        ("http://user:pw@simulator.test/", "user name"),
        ("http://simulator.test:80@evil.com/", "user name"),
        ("http://simulator.test\\@evil.com/", "backslashes"),
        ("http://simulator.test /x", "spaces"),
        ("http://simulator.test/\nx", "control characters"),
        ("http://2130706433/", "standard form"),
        ("http://127.1:8055/", "standard form"),
        ("http://0x7f.0.0.1:8055/", "standard form"),
        ("http://0177.0.0.1:8055/", "standard form"),
        ("http://[fe80::1%25eth0]:8055/", "zone"),
        ("http://[::1:8055/", "not a valid URL"),
        ("http://simulator.test:99999/", "invalid port"),
        ("http://simulator.test/#frag", "fragment"),
        ("ftp://simulator.test/", "http:// or https://"),
        ("//simulator.test/x", "http:// or https://"),
        ("simulator.test", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("http:///x", "no host"),
        ("http://-bad-.test/", "not a valid host name"),
        ("http://" + "a" * 64 + ".test/", "not a valid host name"),
        ("http://simulator.test/" + "x" * 2000, "at most 2000"),
        ("", "http:// or https://"),
        (42, "http:// or https://"),
    ],
)
def test_url__tricky_or_unlisted__refused_with_the_reason(url: Any, reason: str) -> None:
    with pytest.raises(UrlRefused, match=reason):
        HTTP_JOB_POLICY.url_check(url)


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("100.64.0.1", False),  # carrier-grade NAT
        ("169.254.169.254", False),  # cloud metadata
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped loopback
        ("::ffff:10.0.0.1", False),
        ("2002:7f00:1::", False),  # 6to4 carrying 127.0.0.1
        ("2002:a00:1::", False),  # 6to4 carrying 10.0.0.1
        ("2002:808:808::", True),
        ("64:ff9b::7f00:1", False),  # NAT64 carrying 127.0.0.1
        ("64:ff9b::808:808", True),
        ("::7f00:1", False),  # IPv4-compatible 127.0.0.1
    ],
)
def test_is_public__addresses_table(address: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(address)) is public


def test_resolve__name_to_loopback__refused_unless_private_allowed() -> None:
    """The resolve-time check: a listed name that resolves to a private address is refused,
    unless the name is also a private host."""
    fields: dict[str, Any] = {"url": "http://localhost/", "scheme": "http", "host": "localhost", "port": 80}
    target = Target(**fields, path="/", ip=None, private_ok=False, policy="test")

    with pytest.raises(UrlRefused, match="non-public address"):
        HTTP_JOB_POLICY.addresses_resolve(target)
    allowed = Target(**fields, path="/", ip=None, private_ok=True, policy="test")
    assert any(a.is_loopback for a in HTTP_JOB_POLICY.addresses_resolve(allowed))


@pytest.mark.parametrize(
    ("entry", "ok"),
    [
        ("api.example.com", True),
        ("*.example.com:8443", True),
        ("[::1]:8055", True),
        ("10.0.0.1", True),
        ("*.10.0.0.1", False),
        ("host:0", False),
        ("host:x", False),
        ("", False),
        ("[::1", False),
        ("a b", False),
    ],
)
def test_allowlist_entry__parsed_or_refused(entry: str, ok: bool) -> None:
    if ok:
        assert pattern_parse(entry)
    else:
        with pytest.raises(ValueError, match=r"."):
            pattern_parse(entry)


GOOD = {"method": "post", "url": "http://simulator.test/hook", "body": {"a": 1}}


def test_input__good__cleaned() -> None:
    cleaned = validate_http_call_input(
        {**GOOD, "headers": {"X-Token": "t"}, "timeout": 2.5, "expected_status": [201, 200, 200]}
    )

    assert cleaned == {
        "method": "POST",
        "url": "http://simulator.test/hook",
        "headers": {"X-Token": "t"},
        "body": {"a": 1},
        "timeout": 2.5,
        "expected_status": [200, 201],
    }
    assert validate_http_call_input({"method": "GET", "url": "http://simulator.test/"}) == {
        "method": "GET",
        "url": "http://simulator.test/",
        "headers": {},
    }


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"method": "TRACE"}, "method", "must be one of"),
        ({"method": None}, "method", "must be one of"),
        ({"url": "http://127.0.0.1:22/"}, "url", "is not an address this service may call"),
        ({"headers": ["X-A: 1"]}, "headers", "must be an object"),
        ({"headers": {"Host": "simulator.test"}}, "headers", "Host: set by"),
        ({"headers": {"connection": "close"}}, "headers", "set by"),
        ({"headers": {"Transfer-Encoding": "chunked"}}, "headers", "set by"),
        ({"headers": {"Proxy-Authorization": "x"}}, "headers", "set by"),
        ({"headers": {"Proxy-Foo": "x"}}, "headers", "set by"),
        ({"headers": {"Idempotency-Key": "mine"}}, "headers", "set by"),
        ({"headers": {"X-A": 1}}, "headers", "must be a string"),
        ({"headers": {"X-A": "a\r\nInjected: yes"}}, "headers", "one line"),
        ({"headers": {"bad name": "x"}}, "headers", "not a valid header name"),
        ({"headers": {"X-Name": "Müller"}}, "headers", "X-Name: the value must be visible ASCII"),
        ({"headers": {"X-A": "a\x01b"}}, "headers", "visible ASCII"),
        ({"headers": {"X-A": "a\x7f"}}, "headers", "visible ASCII"),
        ({"headers": {"X-A": "trailing "}}, "headers", "none at either end"),
        ({"headers": {"X-A": "\tlead"}}, "headers", "none at either end"),
        ({"headers": {"X-A": "x" * 8193}}, "headers", "at most 8192"),
        ({"headers": {"X-Ü": "1"}}, "headers", "not a valid header name"),
        ({"headers": {"X:A": "1"}}, "headers", "not a valid header name"),
        ({"headers": {"X-A": "1", "x-a": "2"}}, "headers", "given twice"),
        ({"headers": {f"X-{i}": "v" for i in range(51)}}, "headers", "at most 50"),
        ({"method": "GET"}, "body", "takes no body"),
        ({"method": "HEAD"}, "body", "takes no body"),
        ({"body": "x" * (64 * 1024 + 1)}, "body", "at most"),
        ({"body": float("nan")}, "body", "JSON value"),
        ({"timeout": 0}, "timeout", "above 0"),
        ({"timeout": -1}, "timeout", "above 0"),
        ({"timeout": "5"}, "timeout", "above 0"),
        ({"timeout": True}, "timeout", "above 0"),
        ({"timeout": 6}, "timeout", "at most 5"),  # the tests' step window (SAS_HTTP_JOB_STEP_TIMEOUT)
        ({"expected_status": 99}, "expected_status", "HTTP status"),
        ({"expected_status": [200, "201"]}, "expected_status", "HTTP status"),
        ({"expected_status": []}, "expected_status", "HTTP status"),
        ({"cookies": {}}, "non_field_errors", "unknown field"),
    ],
)
def test_input__bad_field__field_error(change: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(WorkflowInputError) as caught:
        validate_http_call_input({**GOOD, **change})

    assert field in caught.value.errors, caught.value.errors
    assert any(message in text for text in caught.value.errors[field]), caught.value.errors


def test_input__several_bad_fields__all_reported() -> None:
    with pytest.raises(WorkflowInputError) as caught:
        validate_http_call_input({"method": "BREW", "url": "http://evil.com/", "timeout": 0})

    assert set(caught.value.errors) == {"method", "url", "timeout"}


@pytest.mark.django_db
def test_submit__disallowed_url__refused_and_nothing_written(django_user_model: Any) -> None:
    user = django_user_model.objects.create(username="carol")

    with pytest.raises(WorkflowInputError) as caught:
        run_submit(
            workflow=HTTP_CALL_WORKFLOW,
            input={"method": "GET", "url": "http://169.254.169.254/latest/meta-data"},
            owner_id=user.id,
        )

    assert "metadata" in caught.value.errors["url"][0]
    assert Run.objects.count() == 0


def test_call__allowed_name__connects_to_its_checked_address_with_the_name_as_host(
    engine: Any, settings: Any
) -> None:
    """In-process against the real simulator: `localhost` is resolved and checked once, the
    connection goes to that address, and the request still names the host (Host header)."""
    port = os.environ["SIMULATOR_URL"].rsplit(":", 1)[1]
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [f"localhost:{port}"]
    settings.SAS_HTTP_JOB_PRIVATE_HOSTS = [f"localhost:{port}"]
    payload = validate_http_call_input(
        {"method": "PUT", "url": f"http://localhost:{port}/echo/x", "body": "raw", "headers": {"X-A": "1"}}
    )

    result = http_call(payload=payload, idempotency_key="k-1", timeout=5)

    echoed = json.loads(result["body"])
    assert result["status"] == 200
    assert echoed["headers"]["host"] == f"localhost:{port}"
    assert (echoed["method"], echoed["body"], echoed["idempotency_key"]) == ("PUT", "raw", "k-1")
    assert echoed["headers"]["x-a"] == "1" and "content-type" not in echoed["headers"]


def test_call__large_response__body_cut_to_the_limit(engine: Any, settings: Any) -> None:
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [os.environ["SIMULATOR_URL"].removeprefix("http://")]
    settings.SAS_HTTP_JOBS = {**settings.SAS_HTTP_JOBS, "RESPONSE_MAX_BYTES": 100}

    result = http_call(
        payload={"method": "POST", "url": os.environ["SIMULATOR_URL"] + "/echo", "body": "x" * 500},
        idempotency_key="k-2",
        timeout=5,
    )

    assert result["body_truncated"] is True and len(result["body"]) == 100


def test_call__allowlist_shrank_since_saved__permanent_refusal(settings: Any) -> None:
    payload = validate_http_call_input({"method": "GET", "url": "http://simulator.test/"})
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = ["other.test"]

    with pytest.raises(PermanentFault, match="not on the allowlist"):
        http_call(payload=payload, idempotency_key="k-3", timeout=5)


def test_input__ascii_header_values__kept_as_given() -> None:
    headers = {"X-List": "a, b\tc", "X-Empty": "", "Authorization": "Bearer abc.DEF_ghi-~=="}

    assert validate_http_call_input({**GOOD, "headers": headers})["headers"] == headers


@pytest.mark.django_db
def test_submit__step_payload_names_the_runs_owner_and_the_input_cannot(django_user_model: Any) -> None:
    """The breaker's owner comes from the run row (the engine's), never from the input."""
    alice = django_user_model.objects.create(username="alice-h")
    bob = django_user_model.objects.create(username="bob-h")

    run = run_submit(workflow=HTTP_CALL_WORKFLOW, input=GOOD, owner_id=alice.id, kick=False)
    with pytest.raises(WorkflowInputError) as caught:
        run_submit(workflow=HTTP_CALL_WORKFLOW, input={**GOOD, "owner_id": bob.id}, owner_id=alice.id)

    (step,) = run.steps.all()
    payload: dict[str, Any] = step.payload or {}
    assert payload["owner_id"] == alice.id
    assert "unknown field" in caught.value.errors["non_field_errors"][0]
    agent = HttpCallAgent()
    assert agent.breaker_name(payload) == f"http:{alice.id}:simulator.test"
    assert agent.breaker_name({**payload, "owner_id": bob.id}) == f"http:{bob.id}:simulator.test"
    # A step built before the owner was in its payload: the shared per-host breaker of owner 0.
    assert agent.breaker_name({"url": GOOD["url"]}) == "http:0:simulator.test"

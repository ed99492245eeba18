"""HTTP-call jobs: the `http.call` workflow and its agent, `agents.http.call` (queue `agent.http`).

A job (or anyone with `run_submit`) runs an HTTP request as a one-step workflow, so the call
gets what every remote call gets: a complete-by window per attempt, the step's retries with
backoff, a circuit breaker per (owner, destination host), its own worker (the bulkhead), the supervisor's
sweep, and an `Idempotency-Key` header stable across attempts (`<run>:call`).

Input (all validated before anything is written; errors name the field):

    {"method": "POST",                       # GET POST PUT PATCH DELETE HEAD
     "url": "https://api.example.com/hook",  # http(s); allowed by the egress policy (egress.py)
     "headers": {"Authorization": "..."},    # optional, token -> visible ASCII; no hop-by-hop or Host
     "body": {"any": "JSON"} or "raw text",  # optional; JSON is sent as application/json
     "timeout": 10,                          # optional, seconds, at most the step's window
     "expected_status": [200, 201]}          # optional; default: any 2xx is success

Outcome: an expected status (any 2xx by default) is success, and the step's result is
{"status", "content_type", "headers" (those of RESULT_HEADERS the answer had), "body" (first
RESPONSE_MAX_BYTES, decoded), "body_truncated"}: the answer is read bounded (at most
RESPONSE_MAX_BYTES, under the attempt's total deadline). The customer sees it on the run page and
in the API (scheduler/outputs.py, issue 28).
5xx, 408, 425, 429, timeouts and connection errors are transient (the step retries per its
policy); anything else (4xx, a redirect - never followed) is permanent: the step errors and
the run ends Compensated, with the status and the first 200 characters of the body in the
step's error. A header httpx could not send (a step stored before the header rule) is permanent
too, without a call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx
from celery import shared_task
from django.conf import settings

from scheduler.workflows import (
    CONCURRENCY_KEY_MAX,
    CONCURRENCY_LIMIT_MAX,
    StepContext,
    StepDef,
    Workflow,
    WorkflowInputError,
    concurrency_clean,
    concurrency_of_input,
    register,
    step_policy,
)

from .base import AgentTask
from .egress import HTTP_JOB_POLICY, URL_MAX_LENGTH, UrlRefused
from .egress_http import egress_request, header_problem
from .faults import TRANSIENT_STATUSES, PermanentFault, RetryPolicy, TransientFault
from .outbound import excerpt

HTTP_CALL_WORKFLOW = "http.call"
HTTP_CALL_OPERATION = "agents.http.call"

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
BODYLESS_METHODS = ("GET", "HEAD")
MAX_HEADERS = 50
HEADER_NAME_MAX = 256
HEADER_VALUE_MAX = 8192
BODY_MAX_BYTES = 64 * 1024
MAX_EXPECTED_STATUSES = 20
# Hop-by-hop headers (RFC 9110 7.6.1) and those the agent sets itself.
FORBIDDEN_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "accept-encoding",
        "content-length",
        "idempotency-key",
    }
)
# The response headers kept in the step's result (and shown to the job's owner): what a caller
# acts on, written once. Others (Set-Cookie, Server, vendor headers) are dropped: they may carry
# the remote's secrets and are no part of the answer a customer asked for (issue 28).
RESULT_HEADERS = (
    "content-type",
    "content-length",
    "location",
    "retry-after",
    "etag",
    "last-modified",
    "date",
)
RESULT_HEADER_MAX = 512
_FIELDS = ("method", "url", "headers", "body", "timeout", "expected_status", "concurrency")
# The payload's key for the run's owner (set by the engine at submit, not an input field).
OWNER_KEY = "owner_id"


def _policy() -> dict[str, Any]:
    return dict(settings.SAS_HTTP_JOBS)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _clean_headers(value: object, errors: dict[str, list[str]]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        errors["headers"] = ["must be an object of header names to string values"]
        return {}
    problems: list[str] = []
    seen: set[str] = set()
    if len(value) > MAX_HEADERS:
        problems.append(f"at most {MAX_HEADERS} headers")
    for name, text in value.items():
        if not isinstance(name, str) or len(name) > HEADER_NAME_MAX:
            problems.append(f"{str(name)[:40]!r} is not a valid header name")
            continue
        if isinstance(text, str) and len(text) > HEADER_VALUE_MAX:
            problems.append(f"{name}: the value must be at most {HEADER_VALUE_MAX} characters")
            continue
        # Names: RFC 9110 tokens. Values: visible ASCII (a value httpx cannot encode would
        # fail every attempt), one line, no whitespace at either end.
        problem = header_problem(name, text)
        if problem is not None:
            problems.append(problem)
            continue
        lower = name.lower()
        if lower in FORBIDDEN_HEADERS or lower.startswith("proxy-"):
            problems.append(f"{name}: set by the connection or the agent, not by a job")
        if lower in seen:
            problems.append(f"{name}: given twice")
        seen.add(lower)
    if problems:
        errors["headers"] = problems
        return {}
    return {str(k): str(v) for k, v in value.items()}


def _clean_body(value: object, method: object, errors: dict[str, list[str]]) -> object:
    if value is None:
        return None
    if method in BODYLESS_METHODS:
        errors["body"] = [f"a {method} request takes no body"]
        return None
    try:
        size = len(value.encode() if isinstance(value, str) else json.dumps(value, allow_nan=False).encode())
    except (TypeError, ValueError):
        errors["body"] = ["must be a string or a JSON value"]
        return None
    if size > BODY_MAX_BYTES:
        errors["body"] = [f"at most {BODY_MAX_BYTES} bytes"]
        return None
    return value


def _clean_expected(value: object, errors: dict[str, list[str]]) -> list[int] | None:
    if value is None:
        return None
    statuses = [value] if not isinstance(value, list) else value
    if (
        not statuses
        or len(statuses) > MAX_EXPECTED_STATUSES
        or not all(isinstance(s, int) and not isinstance(s, bool) and 100 <= s <= 599 for s in statuses)
    ):
        errors["expected_status"] = [
            f"must be an HTTP status (100-599) or a list of up to {MAX_EXPECTED_STATUSES} of them"
        ]
        return None
    return sorted(set(statuses))


def validate_http_call_input(data: Mapping[str, Any]) -> dict[str, Any]:
    """Clean an `http.call` input or raise WorkflowInputError with every field's errors."""
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        errors["non_field_errors"] = [f"unknown field(s): {', '.join(map(str, unknown))}"]
    method = data.get("method")
    if isinstance(method, str):
        method = method.strip().upper()
    if method not in METHODS:
        errors["method"] = [f"must be one of {', '.join(METHODS)}"]
    try:
        url = HTTP_JOB_POLICY.url_check(data.get("url")).url
    except UrlRefused as exc:
        errors["url"] = [exc.customer]
        url = ""
    headers = _clean_headers(data.get("headers"), errors)
    body = _clean_body(data.get("body"), method, errors)
    timeout = data.get("timeout")
    window = float(_policy()["STEP_TIMEOUT"])
    if timeout is not None and (not _number(timeout) or not 0 < timeout <= window):
        errors["timeout"] = [f"must be a number of seconds above 0 and at most {window:g}"]
    expected = _clean_expected(data.get("expected_status"), errors)
    concurrency = concurrency_clean(data.get("concurrency"), errors)
    if errors:
        raise WorkflowInputError(errors)
    cleaned: dict[str, Any] = {"method": method, "url": url, "headers": headers}
    if body is not None:
        cleaned["body"] = body
    if timeout is not None:
        cleaned["timeout"] = timeout
    if expected is not None:
        cleaned["expected_status"] = expected
    if concurrency is not None:
        cleaned["concurrency"] = concurrency
    return cleaned


HTTP_CALL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["method", "url"],
    "properties": {
        "method": {"type": "string", "enum": list(METHODS)},
        "url": {
            "type": "string",
            "format": "uri",
            "maxLength": URL_MAX_LENGTH,
            "description": "http(s) URL allowed by SAS_HTTP_JOB_ALLOWED_HOSTS (host and path prefix)",
        },
        "headers": {
            "type": "object",
            "additionalProperties": {
                "type": "string",
                "maxLength": HEADER_VALUE_MAX,
                "pattern": "^(?:[!-~](?:[ \t]*[!-~])*)?$",
            },
            "propertyNames": {"pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", "maxLength": HEADER_NAME_MAX},
            "maxProperties": MAX_HEADERS,
            "description": "no hop-by-hop headers, Host, Content-Length or Idempotency-Key; names are"
            " RFC 9110 tokens, values visible ASCII (spaces and tabs inside, none at either end)",
        },
        "body": {"description": "a string (sent as is) or any JSON value (sent as application/json)"},
        "timeout": {"type": "number", "exclusiveMinimum": 0, "description": "seconds per attempt"},
        "expected_status": {
            "oneOf": [
                {"type": "integer", "minimum": 100, "maximum": 599},
                {
                    "type": "array",
                    "items": {"type": "integer", "minimum": 100, "maximum": 599},
                    "minItems": 1,
                    "maxItems": MAX_EXPECTED_STATUSES,
                },
            ],
            "description": "statuses that count as success (default: any 2xx)",
        },
        "concurrency": {
            "type": "object",
            "additionalProperties": False,
            "required": ["key"],
            "properties": {
                "key": {"type": "string", "minLength": 1, "maxLength": CONCURRENCY_KEY_MAX},
                "limit": {"type": "integer", "minimum": 1, "maximum": CONCURRENCY_LIMIT_MAX, "default": 1},
            },
            "description": "at most `limit` of your calls with this key at a time; the others wait in"
            " order (for example one per account: a non-idempotent endpoint)",
        },
    },
}


# -- the agent ---------------------------------------------------------------------------------


def http_call(*, payload: Mapping[str, Any], idempotency_key: str, timeout: float) -> dict[str, Any]:
    """Make one call described by a cleaned `http.call` input, under the jobs' egress policy
    (checked again now: the settings may have changed since the job was saved). Returns the
    step's result; raises TransientFault / NotSentFault / PermanentFault."""
    method, url = payload["method"], payload["url"]
    headers = {**payload.get("headers", {}), "Idempotency-Key": idempotency_key}
    content: bytes | None = None
    body = payload.get("body")
    if isinstance(body, str):
        content = body.encode()
    elif body is not None:
        content = json.dumps(body, separators=(",", ":")).encode()
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
    if payload.get("timeout"):
        timeout = min(timeout, float(payload["timeout"]))
    limit = int(_policy()["RESPONSE_MAX_BYTES"])
    response = egress_request(
        policy=HTTP_JOB_POLICY,
        method=method,
        url=url,
        headers=headers,
        content=content,
        timeout=timeout,
        max_bytes=limit,
    )
    status = response.status
    expected = payload.get("expected_status")
    if expected is not None and status in expected:
        pass
    elif status >= 500 or status in TRANSIENT_STATUSES:
        raise TransientFault(f"{method} {url} answered {status}: {excerpt(response.body)}")
    elif expected is not None or not 200 <= status < 300:
        raise PermanentFault(f"{method} {url} answered {status}: {excerpt(response.body)}")
    return {
        "status": status,
        "content_type": response.headers.get("content-type", ""),
        "headers": result_headers(response.headers),
        "body": response.body.decode(_charset(response.headers), errors="replace"),
        "body_truncated": response.truncated,
    }


def result_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed headers of an answer (RESULT_HEADERS, names in lower case), each value
    cut to RESULT_HEADER_MAX characters: a small, bounded part of the step's result."""
    return {name: headers[name][:RESULT_HEADER_MAX] for name in RESULT_HEADERS if name in headers}


def _charset(headers: httpx.Headers) -> str:
    charset = httpx.Response(200, headers=headers).charset_encoding or "utf-8"
    try:
        "".encode(charset)
    except LookupError:
        return "utf-8"
    return charset


class HttpCallAgent(AgentTask):
    service = "http"
    # One call per attempt: the step's policy (backoff, max failures) does the retrying, so
    # every try of a job's call is an attempt in its history.
    retry_policy = RetryPolicy(max_tries=1)

    def breaker_name(self, payload: dict[str, Any]) -> str:
        """Per (owner, host), as webhooks: one tenant's failing calls open that tenant's breaker
        only, and another tenant's calls to the same host go on. The owner is the run's, put in
        the step's payload by the engine at submit (`_payload`), never the input's."""
        owner = payload_owner(payload)
        try:
            return f"http:{owner}:{HTTP_JOB_POLICY.url_check(payload.get('url')).netloc}"
        except UrlRefused:
            return f"http:{owner}:refused"

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        return http_call(payload=payload, idempotency_key=idempotency_key, timeout=timeout)


@shared_task(name=HTTP_CALL_OPERATION, bind=True, base=HttpCallAgent)
def http_call_operation(self: HttpCallAgent, **kwargs: Any) -> str:
    return self.perform(path="", **kwargs)


def _payload(ctx: StepContext) -> dict[str, Any]:
    """The call's step payload: the cleaned input, and the run's owner (its breaker's key), from
    the run row - the input cannot name one (`owner_id` is no input field)."""
    call = {name: value for name, value in ctx.input.items() if name != "concurrency"}
    return {**call, OWNER_KEY: ctx.owner_id}


def payload_owner(payload: Mapping[str, Any]) -> int:
    """The owner a step's payload was built for; 0 for a run nobody owns and for steps built
    before the owner went into the payload (they share one breaker per host until they end)."""
    owner = payload.get(OWNER_KEY)
    return owner if isinstance(owner, int) and not isinstance(owner, bool) and owner > 0 else 0


def build_http_call_workflow() -> Workflow:
    return Workflow(
        name=HTTP_CALL_WORKFLOW,
        label="HTTP call",
        description="Send one HTTP request to an allowed host; retried on 5xx and timeouts.",
        validate=validate_http_call_input,
        input_schema=HTTP_CALL_INPUT_SCHEMA,
        input_example={
            "method": "POST",
            "url": os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055").rstrip("/") + "/echo",
            "body": {"ping": True},
            "expected_status": 200,
        },
        # Customers may aim it: the URL is checked against the egress allowlist when the job is
        # saved and again at call time (agents/http_allowlist.py).
        customer_schedulable=True,
        concurrency=concurrency_of_input,
        steps=[
            StepDef(
                name="call",
                label="HTTP call",
                operation=HTTP_CALL_OPERATION,
                payload=_payload,
                output="http",
                **step_policy(_policy()),
            )
        ],
    )


register(build_http_call_workflow())

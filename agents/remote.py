"""The remote services' HTTP client (issue 18: every answer read bounded): one pooled client
per process, and `remote_post`, the one call an agent of a configured service (inventory,
payment, shipping) makes.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

import httpx
from django.conf import settings

from sasproject.json_input import json_parse

from .faults import TRANSIENT_STATUSES, PermanentFault, TransientFault, transport_faults
from .outbound import bounded_client, excerpt, read_bounded, total_deadline

_local = threading.local()


def _http_client() -> httpx.Client:
    """One pooled client per process (created after fork; prefork children must not share).
    Its socket operations obey `total_deadline` (agents/outbound.py)."""
    client: httpx.Client | None = getattr(_local, "client", None)
    if client is None or getattr(_local, "pid", None) != os.getpid():
        client = bounded_client(max_connections=20, max_keepalive=10)
        _local.client = client
        _local.pid = os.getpid()
    return client


def close_http_client() -> None:
    """Close this thread's pooled client (worker shutdown, tests)."""
    client: httpx.Client | None = getattr(_local, "client", None)
    if client is not None:
        client.close()
        _local.client = None


@contextlib.contextmanager
def http_client_used(client: httpx.Client) -> Iterator[None]:
    """This thread's remote calls go through `client` while the block runs, then the pooled
    client again. For the test harness (sastools.testkit), whose fake remote services are an
    httpx transport: every line of `remote_post` - the request, its bounded read, the mapping
    of statuses to faults, the JSON limits - runs as in production. Production never calls it."""
    saved = (getattr(_local, "client", None), getattr(_local, "pid", None))
    _local.client, _local.pid = client, os.getpid()
    try:
        yield
    finally:
        _local.client, _local.pid = saved


def remote_post(
    *, service: str, path: str, body: dict[str, Any], idempotency_key: str, timeout: float
) -> Any:
    """POST to a remote service. Returns the JSON body; raises TransientFault/PermanentFault.
    The whole call ends within `timeout` and at most REMOTE_RESPONSE_MAX_BYTES of the answer are
    read: a configured service is trusted with our requests, not with our workers' memory."""
    url = settings.SAS["REMOTE_URLS"][service].rstrip("/") + path
    limit = int(settings.SAS["REMOTE_RESPONSE_MAX_BYTES"])
    with transport_faults(service, timeout=timeout), total_deadline(timeout):
        client = _http_client()
        request = client.build_request(
            "POST",
            url,
            json=body,
            headers={"Idempotency-Key": idempotency_key, "Accept-Encoding": "identity"},
            timeout=httpx.Timeout(timeout),
        )
        response = client.send(request, stream=True)
        try:
            data, truncated = read_bounded(response, limit)
        finally:
            response.close()
    status = response.status_code
    if status >= 500 or status in TRANSIENT_STATUSES:
        raise TransientFault(f"{service} answered {status}: {excerpt(data)}")
    if status >= 400:
        raise PermanentFault(f"{service} refused ({status}): {excerpt(data, 500)}")
    if truncated:
        raise TransientFault(f"{service} sent more than {limit} bytes")
    try:
        # The users' limits (depth, NUL, NaN): the answer goes into a jsonb column, and a deep
        # one would exhaust the stack (sasproject/json_input.py).
        return json_parse(data)
    except ValueError as exc:
        raise TransientFault(f"{service} sent a body that is not JSON we take ({exc})") from exc

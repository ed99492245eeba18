"""One outbound call under an egress policy: checked, resolved once, pinned, bounded.

`egress_request` is what every agent whose URL a customer chose calls (http.call jobs, order
callbacks; alert webhooks later): the URL is checked by the policy again at call time (the
settings may have changed since it was saved), the host is resolved once and every address
checked, and the connection goes to a checked address - the name still goes in `Host` and in
TLS's SNI (the certificate is verified against it), so there is no second lookup a DNS
rebinding could answer differently. Redirects are never followed (a 3xx is the answer). The
answer is read under the call's total deadline and capped (agents/outbound.py).
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from .egress import EgressPolicy, UrlRefused
from .faults import NotSentFault, PermanentFault, transport_faults
from .outbound import bounded_client, read_bounded, total_deadline

_local = threading.local()
# Destinations with a pooled client kept per thread; the least recently used is closed past it.
MAX_CLIENTS = 32
# RFC 9110 5.1: a field name is a token.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# A field value we send: visible ASCII, spaces and tabs inside (RFC 9110 5.5, without obs-text:
# httpx encodes values as ASCII), and no whitespace at either end (h11 refuses it).
_FIELD_VALUE = re.compile(r"^(?:[\x21-\x7e](?:[\x20\x09]*[\x21-\x7e])*)?$")


def header_problem(name: object, value: object) -> str | None:
    """Why the header `name: value` cannot be sent as it is, or None. The rule of what a job may
    ask (agents/http_call.py) and of what `egress_request` sends: one rule, asked twice."""
    if not isinstance(name, str) or not _TOKEN.match(name):
        return f"{str(name)[:40]!r} is not a valid header name (letters, digits and !#$%&'*+-.^_`|~)"
    if not isinstance(value, str):
        return f"{name}: the value must be a string"
    if not _FIELD_VALUE.match(value):
        return (
            f"{name}: the value must be visible ASCII characters (spaces and tabs inside, none at"
            " either end), on one line"
        )
    return None


@dataclass(frozen=True)
class EgressResponse:
    status: int
    headers: httpx.Headers
    # At most the caller's `max_bytes` of the raw body.
    body: bytes
    truncated: bool


def _client(key: str) -> httpx.Client:
    """A pooled client per (policy, destination name), per thread (created after fork). Per
    name because the connection goes to an address: a pool shared by two names on one address
    would send one name's requests over a TLS connection verified for the other."""
    clients: OrderedDict[str, httpx.Client] | None = getattr(_local, "clients", None)
    if clients is None or getattr(_local, "pid", None) != os.getpid():
        clients = OrderedDict()
        _local.clients = clients
        _local.pid = os.getpid()
    client = clients.pop(key, None)
    if client is None:
        client = bounded_client(max_connections=10, max_keepalive=4)
        while len(clients) >= MAX_CLIENTS:
            clients.popitem(last=False)[1].close()
    clients[key] = client
    return client


def egress_request(
    *,
    policy: EgressPolicy,
    method: str,
    url: str,
    headers: Mapping[str, str],
    content: bytes | None,
    timeout: float,
    max_bytes: int,
) -> EgressResponse:
    """Make one call to `url` if `policy` allows it. The whole call - connect, send, headers,
    body - ends within `timeout` seconds; at most `max_bytes` of the body are read.

    Raises PermanentFault (the policy refuses the URL or an address it resolves to, or a
    header cannot be sent - `header_problem`), NotSentFault (the name does not resolve, nothing
    reached a server) or the transport faults of `transport_faults`."""
    for name, value in headers.items():
        problem = header_problem(name, value)
        if problem is not None:
            # Would crash or be refused by httpx on every attempt: no attempt can succeed.
            raise PermanentFault(f"{method} {url} not sent: header {problem}")
    try:
        target = policy.url_check(url)
        addresses = policy.addresses_resolve(target)
    except UrlRefused as exc:
        raise PermanentFault(f"{method} {url} refused: {exc}") from exc
    except OSError as exc:
        raise NotSentFault(f"{method} {url}: the host does not resolve: {exc}") from exc
    sent = {
        **{k: v for k, v in headers.items() if k.lower() not in ("host", "accept-encoding")},
        "Host": target.netloc,
        # The body is read raw and capped: no compressed answer to inflate.
        "Accept-Encoding": "identity",
    }
    client = _client(f"{policy.prefix}:{target.host}")
    with transport_faults(f"{method} {target.url}", timeout=timeout), total_deadline(timeout):
        # Connect to an address that was checked (the next one if it refuses: `localhost` may
        # be ::1 first for a server on 127.0.0.1).
        for index, address in enumerate(addresses):
            request = client.build_request(
                method,
                httpx.URL(target.url).copy_with(host=str(address)),
                content=content,
                headers=sent,
                timeout=httpx.Timeout(timeout),
                extensions={"sni_hostname": target.host} if target.ip is None else {},
            )
            try:
                response = client.send(request, stream=True)
                break
            except httpx.ConnectError:
                if index == len(addresses) - 1:
                    raise
        try:
            body, truncated = read_bounded(response, max_bytes)
        finally:
            response.close()
    return EgressResponse(
        status=response.status_code, headers=response.headers, body=body, truncated=truncated
    )

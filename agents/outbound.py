"""Every outbound HTTP response is read bounded: a byte cap, and a TOTAL deadline (issue 18).

httpx's timeouts are per operation: a read timeout of 10 s lets a server that sends one byte
every 9 s hold a worker for ever (a "slow drip"), in the headers as well as in the body. Here
every socket operation of a client made by `bounded_client` - connect, TLS handshake, write,
each read of the headers and the body - waits at most until the deadline set by
`total_deadline(seconds)` around the call; past it the operation raises httpx's timeout (an
agent maps it to a transient fault). The body is read raw (`Accept-Encoding: identity` asked;
no decompression, so no gzip bomb) and at most `limit` bytes of it are kept: memory stays at
the cap plus one network read (64 KiB), whatever the server sends.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
import httpx

_deadline: ContextVar[float | None] = ContextVar("sas_outbound_deadline", default=None)


@contextmanager
def total_deadline(seconds: float) -> Iterator[float]:
    """Every socket operation of a bounded client inside this block ends by `seconds` from now
    (monotonic clock). Nested blocks keep the earlier deadline."""
    deadline = time.monotonic() + max(0.0, seconds)
    outer = _deadline.get()
    token = _deadline.set(deadline if outer is None else min(outer, deadline))
    try:
        yield deadline
    finally:
        _deadline.reset(token)


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the call's total deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any:
        stream = self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(stream)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's sync backend with every operation's timeout clamped to the total deadline."""

    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        stream = self._backend.connect_tcp(
            host, port, _left(timeout, httpcore.ConnectTimeout), local_address, socket_options
        )
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("unix sockets are not used for outbound calls")

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bounded_client(*, max_connections: int, max_keepalive: int) -> httpx.Client:
    """An httpx client whose socket operations obey `total_deadline`. Redirects are never
    followed and proxies from the environment are not used."""
    transport = httpx.HTTPTransport(
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_keepalive)
    )
    # httpx's transport takes no network backend; its pool does (httpcore's documented hook).
    transport._pool._network_backend = DeadlineBackend()
    return httpx.Client(transport=transport, follow_redirects=False, trust_env=False)


def read_bounded(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of a streamed response's raw body, and whether there was more.
    Stops reading (the caller closes the response, dropping the connection) at the cap."""
    data = bytearray()
    for chunk in response.iter_raw():
        data += chunk[: limit + 1 - len(data)]
        if len(data) > limit:
            return bytes(data[:limit]), True
    return bytes(data), False


def excerpt(body: bytes, limit: int = 200) -> str:
    """The start of a body for an error message: at most `limit` characters, control characters
    shown as spaces (an error is one line in a log or a page)."""
    decoded = body[: limit * 4].decode("utf-8", errors="replace")
    cleaned = "".join(c if c.isprintable() else " " for c in decoded[:limit])
    return cleaned + ("..." if len(decoded) > limit or len(body) > limit * 4 else "")

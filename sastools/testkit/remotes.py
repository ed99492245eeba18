"""Fake remote services, scripted per call: the agents' HTTP client answers from a script.

A fake stands in for a service of `settings.SAS["REMOTE_URLS"]` (what `remote_operation`
agents call). It is an httpx transport under the agent's real client
(`agents.remote.http_client_used`), so everything the agent does with an answer - statuses
to faults, the bounded read, the JSON limits, the retries, the breaker - is the production
code. Each call to a (service, path) takes the next behaviour of its script, then the
service's default:

- `answer(body)`: 200 with that JSON body;
- `refuse(status, error)`: a 4xx (a permanent fault: no retry, the run compensates);
- `fail(status)`: a 5xx (transient: retried within the attempt, then by the scheduler);
- `time_out()`: no answer within the call's timeout - the virtual clock moves by that
  timeout and the client raises its ReadTimeout (transient);
- `hang()`: the agent never comes back from the call (its worker died, or hangs until
  killed): no reply at all; the step stays Processing until the supervisor's sweep.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from django.conf import settings
from django.test import override_settings

from agents.remote import http_client_used

from .clock import VirtualClock


class HarnessError(Exception):
    """A test's harness was used wrongly (an unscripted service, a run that never settles)."""


class AgentLost(BaseException):
    """Raised inside an agent by `hang()`: a BaseException, so no `except Exception` of the
    agent turns it into a reply - the attempt ends with nothing said, as when a worker dies."""


class UnscriptedCall(BaseException):
    """A call to a service no fake was declared for: escapes the agent and fails the test."""


@dataclass(frozen=True)
class FakeCall:
    service: str
    path: str
    body: Any
    idempotency_key: str
    at: datetime
    behaviour: str


Behaviour = Callable[[httpx.Request, VirtualClock], httpx.Response]


class _Body(httpx.SyncByteStream):
    """A response body read as a stream, as the agent's client reads a real one (an httpx
    `Response(json=...)` is read at once, and its stream cannot be read again)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __iter__(self) -> Iterator[bytes]:
        yield self.data


def _json_response(status: int, body: Any) -> httpx.Response:
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(data))}
    return httpx.Response(status, headers=headers, stream=_Body(data))


def _named(name: str, fn: Behaviour) -> Behaviour:
    fn.__name__ = name
    return fn


def answer(body: Any = None, *, status: int = 200) -> Behaviour:
    """The service answers `status` (2xx) with `body` as JSON."""
    if not 200 <= status < 300:
        raise ValueError(f"answer() is a success; use refuse() or fail() for {status}")
    return _named("answer", lambda request, clock: _json_response(status, body if body is not None else {}))


def refuse(status: int = 422, error: str = "refused", **extra: Any) -> Behaviour:
    """The service refuses (a 4xx with `{"error": error, ...}`): a permanent fault."""
    if not 400 <= status < 500 or status in (408, 429):
        raise ValueError(f"refuse() is a 4xx the agent takes as permanent, not {status}")
    return _named("refuse", lambda request, clock: _json_response(status, {"error": error, **extra}))


def fail(status: int = 503) -> Behaviour:
    """The service answers an error the agent retries (5xx, 408 or 429)."""
    if not (status >= 500 or status in (408, 429)):
        raise ValueError(f"fail() is a transient status (5xx, 408, 429), not {status}")
    return _named("fail", lambda request, clock: _json_response(status, {"error": "unavailable"}))


def time_out() -> Behaviour:
    """No answer before the call's timeout: the clock moves by it, then the client gives up."""

    def behaviour(request: httpx.Request, clock: VirtualClock) -> httpx.Response:
        timeouts = request.extensions.get("timeout") or {}
        clock.advance(float(timeouts.get("read") or 0.0))
        raise httpx.ReadTimeout("fake: no answer before the timeout", request=request)

    return _named("time_out", behaviour)


def hang() -> Behaviour:
    """The agent is lost inside the call: it never replies (see AgentLost)."""

    def behaviour(request: httpx.Request, clock: VirtualClock) -> httpx.Response:
        raise AgentLost(f"agent lost during {request.url}")

    return _named("hang", behaviour)


@dataclass
class FakeService:
    name: str
    default: Behaviour
    scripts: dict[str, deque[Behaviour]] = field(default_factory=lambda: defaultdict(deque))

    def script(self, path: str, *behaviours: Behaviour) -> FakeService:
        """The next calls to `path` behave as `behaviours`, in order (then `default`)."""
        self.scripts[path].extend(behaviours)
        return self

    def next_behaviour(self, path: str) -> Behaviour:
        queue = self.scripts.get(path)
        return queue.popleft() if queue else self.default


class FakeRemotes:
    """The fake services of one harness, and every call they received."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.services: dict[str, FakeService] = {}
        self.calls: list[FakeCall] = []

    def service(self, name: str, *, default: Behaviour | None = None) -> FakeService:
        """Declare (or get) the fake for service `name`; unscripted calls get `default`
        (`answer({})` unless given)."""
        if name not in self.services:
            self.services[name] = FakeService(name, default or answer({}))
        elif default is not None:
            self.services[name].default = default
        return self.services[name]

    def called(self, service: str | None = None, path: str | None = None) -> list[FakeCall]:
        """The calls received, in order, optionally those of one service (and path)."""
        return [
            c
            for c in self.calls
            if (service is None or c.service == service) and (path is None or c.path == path)
        ]

    def _handle(self, request: httpx.Request) -> httpx.Response:
        service, path = _service_of(str(request.url))
        fake = self.services.get(service)
        if fake is None:
            raise UnscriptedCall(
                f"a call to service {service!r} ({request.url}): declare harness.remote({service!r})"
            )
        behaviour = fake.next_behaviour(path)
        body = json.loads(request.content) if request.content else None
        key = request.headers.get("Idempotency-Key", "")
        self.calls.append(FakeCall(service, path, body, key, self.clock.now(), behaviour.__name__))
        return behaviour(request, self.clock)

    @contextmanager
    def installed(self) -> Iterator[None]:
        """While the block runs, agents' remote calls (this thread) go to the fakes: every
        service's URL - configured or not - is a fake host that `_handle` answers."""
        client = httpx.Client(transport=httpx.MockTransport(self._handle))
        try:
            with (
                override_settings(SAS={**settings.SAS, "REMOTE_URLS": _FakeUrls()}),
                http_client_used(client),
            ):
                yield
        finally:
            client.close()


class _FakeUrls(dict[str, str]):
    """REMOTE_URLS under the harness: any service's URL is its fake host."""

    def __missing__(self, service: str) -> str:
        return f"http://{service}{_FAKE_HOST}"


_FAKE_HOST = ".fake.invalid"


def _service_of(url: str) -> tuple[str, str]:
    """(service, path) of a fake URL."""
    parsed = httpx.URL(url)
    return (parsed.host or "").removesuffix(_FAKE_HOST), parsed.path

"""The faults an agent's call ends in, and what each means for the step: a transient fault is
retried (and, if it may have reached the service, counted against the step's failure budget); a
fault that sent nothing costs no budget; a permanent fault (a 4xx) ends the step. Also the map
from httpx's transport errors onto them, shared by every outbound call, and the policy of the
retries a transient fault gets inside one attempt.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx


class TransientFault(Exception):
    """Worth retrying: the service may succeed next time."""

    # The call may have reached the service (a timeout after sending, a 5xx): it counts
    # against the step's failure budget, and the step may need undoing.
    reached = True


class NotSentFault(TransientFault):
    """Nothing reached the service (connection refused, connect timeout, no pooled connection
    free): retrying is worth it, and the attempt costs no failure budget."""

    reached = False


class PermanentFault(Exception):
    """The service refused for good (4xx): retrying cannot help."""


TRANSIENT_STATUSES = {408, 425, 429}


@contextmanager
def transport_faults(what: str, *, timeout: float) -> Iterator[None]:
    """Map httpx's transport errors of a call to `what` onto the agent's faults: nothing sent
    (connection refused, connect timeout, no pooled connection free) -> NotSentFault; a timeout
    or a broken connection after sending -> TransientFault."""
    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        raise NotSentFault(f"{what} unreachable: {exc.__class__.__name__}: {exc}") from exc
    except httpx.TimeoutException as exc:
        raise TransientFault(f"{what} timed out after {timeout:.2f}s") from exc
    except httpx.TransportError as exc:
        raise TransientFault(f"{what} unreachable: {exc.__class__.__name__}: {exc}") from exc


@dataclass(frozen=True)
class RetryPolicy:
    """Retries inside one attempt (one claim). Between attempts the scheduler's backoff applies."""

    max_tries: int = 4
    base: float = 0.1
    cap: float = 2.0
    # Don't start a call with less time than this left: it could only time out.
    min_call_window: float = 0.05

    def delay(self, tries: int) -> float:
        # Full jitter: https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/
        return random.uniform(0, min(self.cap, self.base * (2 ** (tries - 1))))

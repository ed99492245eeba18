"""The webhook agent: `agents.webhook.deliver` on the `agent.webhook` queue (CELERY_TASK_ROUTES);
and the outbox's retention, `webhooks.purge_deliveries`, a task jobs can run (`@schedulable`).

It is an `AgentTask` like the inventory or payment agents; only the remote call differs: the
signed body goes to the subscriber's URL instead of a configured service, and the circuit breaker
is per destination host, so one dead receiver does not make every other subscriber wait.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
from celery import shared_task

from agents.base import TRANSIENT_STATUSES, AgentTask, PermanentFault, TransientFault
from agents.schedulable import schedulable
from scheduler.workflows import WorkflowInputError

from .services import webhook_deliveries_purge
from .signing import TIMESTAMP_HEADER

_local = threading.local()


def _client() -> httpx.Client:
    """One pooled client per process (created after fork); redirects are not followed."""
    client: httpx.Client | None = getattr(_local, "client", None)
    if client is None or getattr(_local, "pid", None) != os.getpid():
        client = httpx.Client(
            follow_redirects=False, limits=httpx.Limits(max_connections=20, max_keepalive_connections=10)
        )
        _local.client = client
        _local.pid = os.getpid()
    return client


class WebhookAgent(AgentTask):
    service = "webhook"

    def breaker_name(self, payload: dict[str, Any]) -> str:
        return f"webhook:{urlsplit(str(payload.get('url', ''))).netloc}"

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        """POST the stored body, byte for byte, with its signature headers. 2xx is delivered;
        timeouts, connection errors, 5xx, 408/425/429 are retried; any other answer (4xx, a
        redirect) is a refusal and the delivery is given up."""
        headers = {
            **payload["headers"],
            "Content-Type": "application/json",
            "User-Agent": "sasproject-webhooks/1",
            "Idempotency-Key": idempotency_key,
            TIMESTAMP_HEADER: str(int(time.time())),
        }
        url = payload["url"]
        try:
            response = _client().post(
                url, content=payload["body"].encode(), headers=headers, timeout=httpx.Timeout(timeout)
            )
        except httpx.TimeoutException as exc:
            raise TransientFault(f"webhook {url} timed out after {timeout:.2f}s") from exc
        except httpx.TransportError as exc:
            raise TransientFault(f"webhook {url} unreachable: {exc.__class__.__name__}: {exc}") from exc
        if response.status_code >= 500 or response.status_code in TRANSIENT_STATUSES:
            raise TransientFault(f"webhook {url} answered {response.status_code}: {response.text[:200]}")
        if not 200 <= response.status_code < 300:
            raise PermanentFault(f"webhook {url} refused ({response.status_code}): {response.text[:500]}")
        return {"status_code": response.status_code}


@shared_task(name="agents.webhook.deliver", bind=True, base=WebhookAgent)
def webhook_deliver(self: WebhookAgent, **kwargs: Any) -> str:
    return self.perform(path="", **kwargs)


def _purge_arguments_check(arguments: dict[str, Any]) -> None:
    problems = [f"{name}: must be at least 1" for name in ("older_than_days", "limit") if arguments[name] < 1]
    if problems:
        raise WorkflowInputError({"kwargs": problems})


@schedulable(
    label="Purge old webhook deliveries",
    timeout=120,
    max_failures=3,
    validate=_purge_arguments_check,
)
@shared_task(name="webhooks.purge_deliveries")
def webhooks_purge_deliveries(*, older_than_days: int = 30, limit: int = 100_000) -> dict[str, int | bool]:
    """Delete delivered and given-up webhook deliveries older than `older_than_days` days (at
    most `limit` per run; the result says whether more are left)."""
    return webhook_deliveries_purge(older_than_days=older_than_days, limit=limit)

"""The webhook agent: `agents.webhook.deliver` on the `agent.webhook` queue (CELERY_TASK_ROUTES);
and the outbox's retention, `webhooks.purge_deliveries`, a task jobs can run (`@schedulable`).

It is an `AgentTask` like the inventory or payment agents; only the remote call differs: the
signed body goes to the subscriber's URL (under the callback egress policy, webhooks/destinations.py)
instead of a configured service, and the circuit breaker is per (owner, destination host), so
one dead receiver does not make every other subscriber - nor another tenant on that host - wait.

What it sends, and with whose secret, comes from the outbox row its step's run was made for
(`webhook_delivery_for_step`), never from the run's input or the message (issue 26): a run of
`webhook_delivery` that no outbox row started sends nothing, and no input can choose the owner
whose secret signs. The workflow is never a job (`job_target=False`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from celery import shared_task
from django.conf import settings

from agents.base import AgentTask
from agents.egress import EgressPolicy
from agents.egress_http import egress_request
from agents.faults import TRANSIENT_STATUSES, PermanentFault, TransientFault
from agents.outbound import excerpt
from agents.request import AgentRequest
from agents.schedulable import schedulable
from scheduler.workflows import WorkflowInputError

from .destinations import CALLBACK_POLICY
from .services import webhook_deliveries_purge, webhook_delivery_for_step, webhook_secret_get_or_create
from .signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature_compute

logger = logging.getLogger(__name__)


def _owner_id(payload: dict[str, Any]) -> int:
    # Set by `payload_trusted` from the outbox row, before the breaker or the secret is asked.
    return int(payload["owner_id"])


class WebhookAgent(AgentTask):
    service = "webhook"

    def payload_trusted(self, *, step_id: int) -> dict[str, Any] | None:
        """What this step sends, from the row its run was made for (None: no such row)."""
        return webhook_delivery_for_step(step_id=step_id)

    def _perform_attempt(self, request: AgentRequest) -> str:
        """The attempt, on the payload read from the state store (`payload_trusted`) instead of
        the one the message carried. No row for the step's run: nothing is sent; the step is
        answered as a permanent fault (logged), so its run ends instead of being sent again."""
        step_id = request.step_id
        trusted = self.payload_trusted(step_id=step_id)
        if trusted is None:
            error = f"{self.name}: no row of its own was made for this step's run; nothing sent"
            logger.error("step %s: %s", step_id, error)
            deadline = datetime.fromisoformat(request.complete_by)
            return self._reply(step_id, request.lease, deadline, "permanent", error=error)
        return super()._perform_attempt(replace(request, payload=trusted))

    def breaker_name(self, payload: dict[str, Any]) -> str:
        """Per (owner, host): one tenant's failing endpoint opens that tenant's breaker only;
        another tenant's deliveries to the same host are not held back by it."""
        netloc = urlsplit(str(payload.get("url", ""))).netloc.lower()
        return f"webhook:{_owner_id(payload)}:{netloc}"

    def policy_for(self, payload: dict[str, Any]) -> EgressPolicy:
        """The egress policy the URL must pass (a subclass's alert webhooks have their own)."""
        return CALLBACK_POLICY

    def secret_for(self, payload: dict[str, Any]) -> str:
        """The signing secret: the owner's."""
        return webhook_secret_get_or_create(user_id=_owner_id(payload)).secret

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        """POST the stored body, byte for byte, signed now (`t=<now>,v1=<HMAC of "t.body">`),
        under the callback egress policy (checked, resolved and pinned at this attempt), reading
        at most SAS_WEBHOOK_RESPONSE_MAX_BYTES of the answer within the attempt's deadline. 2xx
        is delivered; timeouts, connection errors, 5xx, 408/425/429 are retried; any other
        answer (4xx, a redirect - never followed) or a refused URL gives the delivery up."""
        body = payload["body"].encode()
        timestamp = int(time.time())
        secret = self.secret_for(payload)
        headers = {
            **{k: v for k, v in payload["headers"].items() if k.lower() != SIGNATURE_HEADER.lower()},
            "Content-Type": "application/json",
            "User-Agent": "sasproject-webhooks/1",
            "Idempotency-Key": idempotency_key,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: signature_compute(secret=secret, body=body, timestamp=timestamp),
        }
        url = payload["url"]
        response = egress_request(
            policy=self.policy_for(payload),
            method="POST",
            url=url,
            headers=headers,
            content=body,
            timeout=timeout,
            max_bytes=int(settings.SAS_WEBHOOK_RESPONSE_MAX_BYTES),
        )
        status = response.status
        if status >= 500 or status in TRANSIENT_STATUSES:
            raise TransientFault(f"webhook {url} answered {status}: {excerpt(response.body)}")
        if not 200 <= status < 300:
            raise PermanentFault(f"webhook {url} refused ({status}): {excerpt(response.body)}")
        return {"status_code": status}


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

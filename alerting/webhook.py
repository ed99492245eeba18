"""The alert webhook: the `alert_webhook` workflow, one step that POSTs one signed notification,
run by the webhook agent's worker (`agents.webhook.alert` on the agent.webhook queue).

An ordinary workflow, so a notification gets what every remote call gets: retries with backoff,
a circuit breaker per destination, the supervisor's sweep - and the evaluator only writes a run
row, it never waits on a receiver. The URL passes an egress policy at every attempt:
- an operator rule's URL (SAS_ALERT_WEBHOOK_URL, or the rule's) the alert webhook policy,
  `SAS_ALERT_WEBHOOK_ALLOWED_HOSTS` / `SAS_ALERT_WEBHOOK_PRIVATE_HOSTS` (an operator's own
  incident tool may be on a private address, so it is named there), signed with
  SAS_ALERT_WEBHOOK_SECRET - which has no default: unset, none is sent (the evaluator logs it,
  an attempt made anyway gives up, and `manage.py check` warns), never one signed with
  DJANGO_SECRET_KEY (issue 26);
- a customer's rule's URL the order callbacks' policy (webhooks/destinations.py), signed with
  the customer's own webhook secret, exactly like their order callbacks.
Signature: `X-SAS-Signature: t=<unix>,v1=<HMAC-SHA256 of "<t>.<body>">` (webhooks/signing.py).

Whose secret signs is read from the alert the run was made for (the run's correlation id,
`alert:<id>`, set by `alert_announce`) and its rule's owner - never from the run's input or
the message (issue 26); the URL and body are the run's stored input. The workflow is never a
job (`job_target=False`): only the evaluator starts one.
Dedupe key: `X-SAS-Event-Id`, the body's `event_id` (the same on every retry of a delivery).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from celery import shared_task
from django.conf import settings

from agents.egress import EgressPolicy, egress_policy_register
from agents.faults import PermanentFault
from alerting.models import Alert
from scheduler.models import Step
from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register, step_policy
from webhooks.destinations import CALLBACK_POLICY
from webhooks.signing import EVENT_ID_HEADER
from webhooks.tasks import WebhookAgent

ALERT_WEBHOOK_POLICY = egress_policy_register(EgressPolicy(name="alert webhooks", prefix="SAS_ALERT_WEBHOOK"))
ALERT_WEBHOOK_WORKFLOW = "alert_webhook"
ALERT_WEBHOOK_OPERATION = "agents.webhook.alert"


ALERT_WEBHOOK_NO_SECRET = (
    "operator alert webhook not sent: SAS_ALERT_WEBHOOK_SECRET is not set (it has no default; "
    "docs/operating/operators.md, Alerts)"
)


def alert_webhook_secret() -> str:
    """The secret that signs operator alert webhooks; empty when none is configured."""
    return str(settings.SAS_ALERT_WEBHOOK_SECRET or "")


def _is_uuid(value: object) -> bool:
    try:
        return isinstance(value, str) and str(uuid.UUID(value)) == value
    except ValueError:
        return False


def validate_alert_webhook_input(data: Mapping[str, Any]) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    for key in ("url", "body"):
        if not isinstance(data.get(key), str) or not data.get(key):
            errors[key] = ["must be a non-empty string"]
    owner_id = data.get("owner_id")
    if owner_id is not None and (not isinstance(owner_id, int) or isinstance(owner_id, bool)):
        errors["owner_id"] = ["must be an integer or null"]
    # The announcement's dedupe key (alerting.services.alert_event_id), sent as X-SAS-Event-Id
    # like order webhooks'; runs queued before it existed have none.
    event_id = data.get("event_id")
    if event_id is not None and not _is_uuid(event_id):
        errors["event_id"] = ["must be a UUID or null"]
    if errors:
        raise WorkflowInputError(errors)
    headers = {EVENT_ID_HEADER: event_id} if event_id else {}
    return {"url": data["url"], "body": data["body"], "owner_id": owner_id, "headers": headers}


def _payload(ctx: StepContext) -> dict[str, Any]:
    return dict(ctx.input)


register(
    Workflow(
        name=ALERT_WEBHOOK_WORKFLOW,
        label="Alert webhook (internal)",
        description="Internal: POSTs one signed alert notification (firing or resolved).",
        input_example={"url": "https://alerts.example.com/hook", "body": '{"event": "alert.firing"}'},
        # Never a job (issue 26): its signing identity is its alert's rule's owner.
        job_target=False,
        validate=validate_alert_webhook_input,
        steps=[
            StepDef(
                name="notify",
                operation=ALERT_WEBHOOK_OPERATION,
                payload=_payload,
                **step_policy(settings.SAS_WEBHOOKS),
            )
        ],
    )
)


ALERT_CORRELATION_PREFIX = "alert:"


def alert_webhook_for_step(*, step_id: int) -> dict[str, Any] | None:
    """What the alert webhook agent sends for step `step_id`: the URL and body of its run's
    stored input, and `owner_id` from the alert the run was made for (`alert:<id>`, its rule's
    owner; None for an operator's rule). None when the step is not an `alert_webhook` run's, or
    its alert or rule is gone: nothing may be sent. Two queries."""
    run = (
        Step.objects.filter(pk=step_id, run__workflow=ALERT_WEBHOOK_WORKFLOW)
        .values("run__correlation_id", "run__input")
        .first()
    )
    if run is None or not str(run["run__correlation_id"]).startswith(ALERT_CORRELATION_PREFIX):
        return None
    alert_id = str(run["run__correlation_id"]).removeprefix(ALERT_CORRELATION_PREFIX)
    if not alert_id.isdecimal():
        return None
    rule = Alert.objects.filter(pk=int(alert_id), rule__isnull=False).values("rule__owner_id").first()
    stored = run["run__input"]
    if rule is None or not isinstance(stored, dict):
        return None
    # The run's input is the validated one (`validate_alert_webhook_input`): the event id is
    # already in its headers.
    stored_headers = stored.get("headers")
    event_id = stored_headers.get(EVENT_ID_HEADER) if isinstance(stored_headers, dict) else None
    return {
        "url": stored.get("url"),
        "body": stored.get("body"),
        "owner_id": rule["rule__owner_id"],
        # The dedupe key, from the run's stored input (validated as a UUID at submit).
        "headers": {EVENT_ID_HEADER: event_id} if _is_uuid(event_id) else {},
    }


class AlertWebhookAgent(WebhookAgent):
    def payload_trusted(self, *, step_id: int) -> dict[str, Any] | None:
        return alert_webhook_for_step(step_id=step_id)

    def breaker_name(self, payload: dict[str, Any]) -> str:
        netloc = urlsplit(str(payload.get("url", ""))).netloc.lower()
        owner = payload.get("owner_id")
        return f"webhook:{owner if owner is not None else 'alerts'}:{netloc}"

    def policy_for(self, payload: dict[str, Any]) -> EgressPolicy:
        return ALERT_WEBHOOK_POLICY if payload.get("owner_id") is None else CALLBACK_POLICY

    def secret_for(self, payload: dict[str, Any]) -> str:
        if payload.get("owner_id") is None:
            # A run queued before the secret was removed, or one made by hand: given up, unsent.
            if not (secret := alert_webhook_secret()):
                raise PermanentFault(ALERT_WEBHOOK_NO_SECRET)
            return secret
        return super().secret_for(payload)


@shared_task(name=ALERT_WEBHOOK_OPERATION, bind=True, base=AlertWebhookAgent)
def alert_webhook_deliver(self: AlertWebhookAgent, **kwargs: Any) -> str:
    return self.perform(path="", **kwargs)

"""The `webhook_delivery` workflow: one step that POSTs one signed event to a subscriber.

It is an ordinary workflow, so a delivery gets everything a remote call gets: a complete-by
window, retries with backoff and jitter inside the attempt, the scheduler's backoff between
attempts, a circuit breaker per (owner, destination host), and the supervisor's sweep. The URL
is checked by the callback egress policy at every attempt (webhooks/destinations.py). A delivery that
runs out of attempts ends in Error (its run Compensated: there is nothing to undo), which the
webhooks app records as "given up".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register, step_policy

WEBHOOK_WORKFLOW = "webhook_delivery"
WEBHOOK_OPERATION = "agents.webhook.deliver"


def validate_delivery_input(data: Mapping[str, Any]) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    if not isinstance(data.get("delivery_id"), int):
        errors["delivery_id"] = ["must be an integer"]
    for key in ("url", "body"):
        if not isinstance(data.get(key), str) or not data.get(key):
            errors[key] = ["must be a non-empty string"]
    if data.get("owner_id") is not None and (
        not isinstance(data.get("owner_id"), int) or isinstance(data.get("owner_id"), bool)
    ):
        errors["owner_id"] = ["must be an integer"]
    headers = data.get("headers")
    if not isinstance(headers, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
    ):
        errors["headers"] = ["must be an object of strings"]
    if errors:
        raise WorkflowInputError(errors)
    assert isinstance(headers, Mapping)
    cleaned = {
        "delivery_id": data["delivery_id"],
        "url": data["url"],
        "body": data["body"],
        "headers": dict(headers),
    }
    if data.get("owner_id") is not None:
        cleaned["owner_id"] = data["owner_id"]
    return cleaned


def _payload(ctx: StepContext) -> dict[str, Any]:
    return dict(ctx.input)


def build_webhook_workflow() -> Workflow:
    return Workflow(
        name=WEBHOOK_WORKFLOW,
        label="Webhook delivery (internal)",
        description="Internal: POSTs one outbox delivery, signed, to a subscriber. The engine "
        "starts these itself, for an outbox row; it is never a job.",
        input_example={
            "delivery_id": 1,
            "url": "https://subscriber.example.com/hooks",
            "body": '{"event": "ping"}',
            "headers": {"Content-Type": "application/json"},
        },
        # Never a job (issue 26): only an outbox row starts one, and the agent sends what that
        # row holds, signed with its owner's secret (webhooks/tasks.py).
        job_target=False,
        validate=validate_delivery_input,
        steps=[
            StepDef(
                name="deliver",
                operation=WEBHOOK_OPERATION,
                payload=_payload,
                **step_policy(settings.SAS_WEBHOOKS),
            )
        ],
    )


register(build_webhook_workflow())

"""The `exports.history_csv` workflow: one heartbeat step that writes the CSV."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register

EXPORT_WORKFLOW = "exports.history_csv"
EXPORT_OPERATION = "agents.exports.history_csv"


def validate_export_input(data: Mapping[str, Any]) -> dict[str, Any]:
    try:
        export_id = str(uuid.UUID(str(data.get("export_id"))))
    except ValueError:
        raise WorkflowInputError({"export_id": "must be an export id"}) from None
    if set(data) - {"export_id"}:
        raise WorkflowInputError({"non_field_errors": "only export_id is accepted"})
    return {"export_id": export_id}


def _payload(ctx: StepContext) -> dict[str, Any]:
    return {"export_id": ctx.input["export_id"]}


def build_export_workflow() -> Workflow:
    window = settings.SAS["EXPORT_HEARTBEAT"]
    return Workflow(
        name=EXPORT_WORKFLOW,
        label="History export (CSV)",
        description="Write an export's CSV file of its owner's execution history. Started by "
        "the Exports page with a new export; a job of it would name an existing export.",
        input_example={"export_id": "00000000-0000-0000-0000-000000000000"},
        # Staff-only (the default): the export id is the whole input, and the agent also checks
        # that the export belongs to the run's owner (exports/tasks.py).
        validate=validate_export_input,
        steps=[
            StepDef(
                name="write_csv",
                label="Write the CSV file",
                operation=EXPORT_OPERATION,
                heartbeat=window,
                timeout=window,
                queue_timeout=settings.SAS["EXPORT_QUEUE_TIMEOUT"],
                deadline=settings.SAS["EXPORT_DEADLINE"],
                max_failures=3,
                backoff_base=0.5,
                backoff_max=5.0,
                payload=_payload,
            )
        ],
    )


register(build_export_workflow())

"""A three-step saga of the harness's tests: book a flight, a hotel and a car, each undone by
its cancellation; three fake remote services. Its operations are declared the way a developer
declares theirs (`remote_operation`), and registered once per process."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.operations import remote_operation
from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, get_workflow, register

SAGA = "harness_trip"
SERVICES = ("flight", "hotel", "car")
POLICY: dict[str, Any] = {"timeout": 30, "max_failures": 3, "backoff_base": 2.0, "backoff_max": 60.0}

for _service in SERVICES:
    remote_operation(name=f"agents.{_service}.book", service=_service, path="/book")
    remote_operation(name=f"agents.{_service}.cancel", service=_service, path="/cancel")


def _validate(data: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data.get("traveller"), str) or not data["traveller"]:
        raise WorkflowInputError({"traveller": "required"})
    return {"traveller": data["traveller"]}


def _book(ctx: StepContext) -> dict[str, Any]:
    return {"traveller": ctx.input["traveller"]}


def _cancel(service: str):
    def payload(ctx: StepContext) -> dict[str, Any]:
        return {"booking": ctx.keys[f"book_{service}"]}

    return payload


def _step(service: str) -> StepDef:
    undo = StepDef(
        name=f"cancel_{service}", operation=f"agents.{service}.cancel", payload=_cancel(service), **POLICY
    )
    return StepDef(
        name=f"book_{service}", operation=f"agents.{service}.book", payload=_book, compensation=undo, **POLICY
    )


def saga_workflow() -> Workflow:
    try:
        return get_workflow(SAGA)
    except WorkflowInputError:
        return register(Workflow(name=SAGA, validate=_validate, steps=[_step(s) for s in SERVICES]))


saga_workflow()

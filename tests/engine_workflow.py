"""A workflow of the engine's own, for tests that must not know the order domain.

Three steps, each undone by a compensation; operations are plain names (service tests play the
agent themselves, so nothing consumes them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, get_workflow, register

ENGINE_WORKFLOW = "engine_test"
ENGINE_INPUT = {"x": 1}


def _validate(data: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data.get("x"), int):
        raise WorkflowInputError({"x": "must be an integer"})
    return {"x": data["x"]}


def _first(ctx: StepContext) -> dict[str, Any]:
    return {"x": ctx.input["x"]}


def _after(name: str):
    def payload(ctx: StepContext) -> dict[str, Any]:
        return {"x": ctx.input["x"], "after": ctx.keys[name]}

    return payload


def _undo(name: str):
    def payload(ctx: StepContext) -> dict[str, Any]:
        return {"undo": ctx.keys[name]}

    return payload


def _step(name: str, payload: Any) -> StepDef:
    policy: dict[str, Any] = {"timeout": 30, "max_failures": 3, "backoff_base": 0.2, "backoff_max": 1.0}
    return StepDef(
        name=name,
        operation=f"agents.enginetest.{name}",
        payload=payload,
        compensation=StepDef(
            name=f"undo_{name}", operation=f"agents.enginetest.undo_{name}", payload=_undo(name), **policy
        ),
        **policy,
    )


def register_engine_workflow() -> Workflow:
    try:
        return get_workflow(ENGINE_WORKFLOW)
    except WorkflowInputError:
        return register(
            Workflow(
                name=ENGINE_WORKFLOW,
                validate=_validate,
                # Tests make its jobs for plain users (not staff).
                customer_schedulable=True,
                steps=[_step("a", _first), _step("b", _after("a")), _step("c", _after("b"))],
            )
        )


# Worker processes import this module by name (SAS_WORKFLOW_MODULES, set by tests/conftest.py's
# worker_env) so that jobs of this workflow can fire there.
register_engine_workflow()


# Helpers for tests that play the scheduler themselves on this workflow.


def submit(user: Any, **kwargs: Any) -> Any:
    """A run of the engine workflow, not kicked (the test claims)."""
    from scheduler.services import run_submit

    return run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False, **kwargs)


def claim_one(run: Any) -> Any:
    """Claim the run's one due step (exactly one must be due)."""
    from django.db import transaction

    from scheduler.services import step_claim_due

    with transaction.atomic():
        claims = step_claim_due(instance="test", limit=10, run_id=run.id)
    assert len(claims) == 1
    return claims[0]


def expire(step_id: int) -> None:
    """Its agent started the attempt, and its complete_by is long past."""
    from datetime import UTC, datetime

    from scheduler.models import Step

    Step.objects.filter(pk=step_id).update(complete_by=datetime(2000, 1, 1, tzinfo=UTC), start_by=None)

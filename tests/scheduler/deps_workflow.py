"""A one-step workflow whose agent really runs in a worker (queue `agent.depstest`): it succeeds,
or is refused for good when the run's input says `{"fail": true}` (the run then ends
Compensated: a failed occurrence). For the live dependency tests (issue 30); worker processes
import it by SAS_WORKFLOW_MODULES."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import shared_task

from agents.base import AgentTask
from agents.faults import PermanentFault
from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, get_workflow, register

DEPS_WORKFLOW = "deps_test"
DEPS_OPERATION = "agents.depstest.work"
DEPS_QUEUE = "agent.depstest"
MODULES = "tests.engine_workflow,tests.scheduler.deps_workflow"


class DepsAgent(AgentTask):
    service = "depstest"

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        if payload.get("fail"):
            raise PermanentFault("refused: the test asked this occurrence to fail")
        return {"ok": True}


@shared_task(name=DEPS_OPERATION, bind=True, base=DepsAgent)
def work(self: DepsAgent, **kwargs: Any) -> str:
    return self.perform(path="/", **kwargs)


def _validate(data: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(data.get("fail", False), bool):
        raise WorkflowInputError({"fail": "must be true or false"})
    return {"fail": bool(data.get("fail", False))}


def _payload(ctx: StepContext) -> dict[str, Any]:
    return {"fail": ctx.input["fail"]}


def register_deps_workflow() -> Workflow:
    try:
        return get_workflow(DEPS_WORKFLOW)
    except WorkflowInputError:
        return register(
            Workflow(
                name=DEPS_WORKFLOW,
                validate=_validate,
                customer_schedulable=True,
                steps=[
                    StepDef(
                        name="work",
                        operation=DEPS_OPERATION,
                        payload=_payload,
                        timeout=20.0,
                        queue_timeout=60.0,
                        max_failures=3,
                        backoff_base=0.2,
                        backoff_max=1.0,
                    )
                ],
            )
        )


register_deps_workflow()

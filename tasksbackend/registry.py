"""The tasks this process knows, and the one-step workflow each runs as.

A function is runnable only once its `@task` was evaluated in this process with an
`EngineBackend` (the framework validates every Task it makes with its backend, and ours
registers it here): the agent looks the function up here by its module path and never imports
a path it was given. The module that defines a task is imported as any Celery task module is:
`<app>/tasks.py` by Celery's autodiscovery in every worker, a module elsewhere through the
backend's OPTIONS "MODULES" (tasksbackend/apps.py).

Each (backend alias, queue, function) is a workflow of its own, `djtask:<alias>:<queue>:<module
path>`, with one step `run` on the queue's agent operation and the task's own policy (its
window, failure budget and backoff). Nobody starts one but the backend: it is no job target,
so no person can aim a job or an API call at it (`Workflow.job_target`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django_tasks.base import Task
from django_tasks.exceptions import InvalidTaskError

from agents.schedulable import call_arguments_shape
from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register

WORKFLOW_PREFIX = "djtask:"
# scheduler_run.workflow is a varchar(100).
WORKFLOW_NAME_MAX = 100
STEP_NAME = "run"


@dataclass(frozen=True)
class TaskPolicy:
    """A task's step policy (StepDef's fields): one attempt's window, the failure budget and
    the backoff between attempts."""

    timeout: float
    max_failures: int
    backoff_base: float
    backoff_max: float


@dataclass(frozen=True)
class Known:
    """A registered task: the framework's Task (its function) and what runs it."""

    task: Task[Any, Any]
    workflow: str
    policy: TaskPolicy
    transient: tuple[type[BaseException], ...]


# Module path -> the Task; workflow name -> what it runs.
_by_path: dict[str, Task[Any, Any]] = {}
_by_workflow: dict[str, Known] = {}


def task_workflow_name(*, alias: str, queue_name: str, module_path: str) -> str:
    return f"{WORKFLOW_PREFIX}{alias}:{queue_name}:{module_path}"


def task_register(
    task: Task[Any, Any],
    *,
    operation: str,
    policy: TaskPolicy,
    transient: tuple[type[BaseException], ...],
) -> str:
    """Know `task` in this process and register its workflow (once; the framework validates a
    Task again at each `.using()` and enqueue). Returns the workflow's name. Raises
    InvalidTaskError for a name too long for the run's row, or another function already
    registered at the same module path."""
    name = task_workflow_name(alias=task.backend, queue_name=task.queue_name, module_path=task.module_path)
    if len(name) > WORKFLOW_NAME_MAX:
        raise InvalidTaskError(
            f"task {task.module_path!r} on queue {task.queue_name!r}: its workflow name {name!r} is longer"
            f" than {WORKFLOW_NAME_MAX} characters; use a shorter module path or queue name"
        )
    known = _by_path.get(task.module_path)
    if known is not None and known.func is not task.func:
        raise InvalidTaskError(f"another function is registered as task {task.module_path!r}")
    registered = _by_workflow.get(name)
    if registered is not None:
        if registered.policy != policy:
            raise InvalidTaskError(f"task {task.module_path!r} is registered with another policy")
        return name
    register(
        Workflow(
            name=name,
            label=f"Task {task.module_path}",
            description=(task.func.__doc__ or "").strip().split("\n\n", 1)[0].replace("\n", " "),
            validate=_input_clean,
            job_target=False,
            schedule_to_start=None,
            steps=[
                StepDef(
                    name=STEP_NAME,
                    label=task.name,
                    operation=operation,
                    payload=_payload_builder(task.module_path),
                    timeout=policy.timeout,
                    max_failures=policy.max_failures,
                    backoff_base=policy.backoff_base,
                    backoff_max=policy.backoff_max,
                )
            ],
        )
    )
    _by_path[task.module_path] = task
    _by_workflow[name] = Known(task=task, workflow=name, policy=policy, transient=transient)
    return name


def task_known(module_path: str) -> Task[Any, Any] | None:
    """The Task registered at `module_path` in this process, or None."""
    return _by_path.get(module_path)


def task_of_workflow(workflow: str) -> Known | None:
    """What a run of `workflow` runs, or None: not a task's workflow, or its module was never
    imported in this process (`task_module_path` says which module)."""
    return _by_workflow.get(workflow)


def task_module_path(workflow: str) -> str:
    """The module path a task's workflow name carries ("" if it is not one)."""
    if not workflow.startswith(WORKFLOW_PREFIX):
        return ""
    parts = workflow[len(WORKFLOW_PREFIX) :].split(":", 2)
    return parts[2] if len(parts) == 3 else ""


def task_backend_alias(workflow: str) -> str:
    return workflow[len(WORKFLOW_PREFIX) :].split(":", 1)[0]


def _input_clean(data: Mapping[str, Any]) -> dict[str, Any]:
    """A run's input: {"args": [...], "kwargs": {...}}, already JSON (the backend normalised it)."""
    args, kwargs, errors = call_arguments_shape(data)
    if errors:
        raise WorkflowInputError(errors)
    return {"args": list(args), "kwargs": dict(kwargs)}


def _payload_builder(module_path: str) -> Callable[[StepContext], dict[str, Any]]:
    def payload(ctx: StepContext) -> dict[str, Any]:
        return {
            "task": module_path,
            "args": ctx.input.get("args", []),
            "kwargs": ctx.input.get("kwargs", {}),
            "result_id": ctx.run_id,
        }

    return payload

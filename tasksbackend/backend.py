"""A backend for Django's task framework (the django-tasks backport on Django 5.2; django.tasks
from Django 6) that runs each enqueued task as a one-step run of the engine.

    TASKS = {"default": {"BACKEND": "tasksbackend.backend.EngineBackend",
                         "OPTIONS": {"AGENT_QUEUES": {"default": "agent.tasks"}}}}

    from django_tasks import task

    @task(timeout=30, max_failures=5)
    def send_welcome(user_id: int) -> str: ...

    result = send_welcome.using(priority=10, run_after=later).enqueue(user_id=7)
    result.refresh(); result.status, result.return_value, result.errors

`enqueue` validates the task and its arguments (JSON), then writes the run, its step and its
"received" event in the caller's transaction (`scheduler.services.run_submit`): a rolled-back
transaction leaves no task, and a committed one starts after the commit - the worker never runs
a task whose caller's rows it cannot see yet. So enqueueing inside `transaction.atomic()` is
safe as it is; `transaction.on_commit(partial(t.enqueue, ...))`, which Django's docs advise for
backends that publish at once, works too. The result id is the run's id.

The mapping: `priority` (-100..100) is the run's priority (higher first, as the engine's);
`queue_name` picks the agent queue (OPTIONS "AGENT_QUEUES", framework queue -> agent queue; a
name not mapped is refused by the framework's own check, at `.using()` or enqueue, before
anything is written); `run_after` is the first step's not_before. A task's step policy comes
from its decorator: `timeout` (one attempt's window, seconds; 60), `max_failures` (3),
`backoff_base` (1.0), `backoff_max` (60.0), `retry_on` (exception classes that are transient,
besides the engine's: agents/schedulable.py's list).

Who owns a run: nobody (operator's work) unless the caller says, with `tasks_owner(user)` around
the enqueue; the run then counts as the user's for fairness and quotas, and its result is the
user's to read (tasksbackend/results.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.version import PY311
from django_tasks.backends.base import BaseTaskBackend
from django_tasks.base import Task, TaskResult, TaskResultStatus
from django_tasks.exceptions import InvalidTaskError
from django_tasks.signals import task_enqueued
from django_tasks.utils import normalize_json
from typing_extensions import ParamSpec

from agents.schedulable import DEFAULT_TRANSIENT
from scheduler.services import run_submit

from .agent import operation_for, operation_register
from .registry import TaskPolicy, task_register, task_workflow_name
from .results import task_result_get

T = TypeVar("T")
P = ParamSpec("P")

DEFAULT_AGENT_QUEUES = {"default": "agent.tasks"}

_owner: ContextVar[int | None] = ContextVar("tasksbackend_owner", default=None)


@contextlib.contextmanager
def tasks_owner(user: Any) -> Iterator[None]:
    """Runs of the tasks enqueued inside belong to `user` (None: nobody)."""
    token = _owner.set(user.pk if user is not None else None)
    try:
        yield
    finally:
        _owner.reset(token)


@dataclass(frozen=True, slots=PY311, kw_only=True)  # type: ignore[literal-required]
class EngineTask(Task[P, T]):
    """The framework's Task with the engine's step policy (see the module's docstring)."""

    timeout: float = 60.0
    max_failures: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    retry_on: tuple[type[BaseException], ...] = ()

    def policy(self) -> TaskPolicy:
        return TaskPolicy(
            timeout=float(self.timeout),
            max_failures=int(self.max_failures),
            backoff_base=float(self.backoff_base),
            backoff_max=float(self.backoff_max),
        )


class EngineBackend(BaseTaskBackend):
    task_class = EngineTask

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        routes = dict(self.options.get("AGENT_QUEUES", DEFAULT_AGENT_QUEUES))
        problems = [f"{q!r} -> {a!r}" for q, a in routes.items() if not str(a).startswith("agent.")]
        if problems:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}] AGENT_QUEUES: an agent queue is named agent.<service>:"
                f" {', '.join(problems)}"
            )
        if "QUEUES" in params:
            unmapped = sorted(self.queues - set(routes))
            if unmapped:
                raise ImproperlyConfigured(
                    f"TASKS[{alias!r}]: queue(s) {', '.join(unmapped)} have no agent queue in AGENT_QUEUES"
                )
        else:
            self.queues = set(routes)
        self.routes: dict[str, str] = routes
        for agent_queue in sorted(set(routes.values())):
            operation_register(agent_queue)

    def validate_task(self, task: Task[Any, Any]) -> None:
        """The framework's checks (a module-level function, priority, an aware run_after, a
        queue this backend maps), then ours: the engine's policy, and the task is registered in
        this process (tasksbackend/registry.py) - the only way a function becomes runnable."""
        super().validate_task(task)
        if not isinstance(task, EngineTask):
            raise InvalidTaskError(
                f"{task.module_path}: define it with @task while TASKS uses {type(self).__name__}"
            )
        policy = task.policy()
        if not (
            policy.timeout > 0 and policy.max_failures >= 1 and 0 <= policy.backoff_base <= policy.backoff_max
        ):
            raise InvalidTaskError(
                f"{task.module_path}: timeout must be > 0, max_failures >= 1,"
                " 0 <= backoff_base <= backoff_max"
            )
        if not all(isinstance(c, type) and issubclass(c, BaseException) for c in task.retry_on):
            raise InvalidTaskError(f"{task.module_path}: retry_on takes exception classes")
        task_register(
            task,
            operation=operation_for(self.routes[task.queue_name]),
            policy=policy,
            transient=DEFAULT_TRANSIENT + tuple(task.retry_on),
        )

    def enqueue(self, task: Task[P, T], args: P.args, kwargs: P.kwargs) -> TaskResult[T]:  # type: ignore[valid-type]
        """Write the task's run in the caller's transaction (see the module's docstring)."""
        self.validate_task(task)
        try:
            arguments = normalize_json({"args": list(args), "kwargs": dict(kwargs)})
        except (TypeError, ValueError) as exc:
            raise InvalidTaskError(f"{task.module_path}: arguments must be JSON values ({exc})") from exc
        run = run_submit(
            workflow=task_workflow_name(
                alias=self.alias, queue_name=task.queue_name, module_path=task.module_path
            ),
            input=arguments,
            owner_id=_owner.get(),
            priority=task.priority,
            not_before=task.run_after,
            correlation_id=f"task:{task.name}"[:100],
        )
        result: TaskResult[T] = TaskResult(
            task=task,
            id=str(run.id),
            status=TaskResultStatus.READY,
            enqueued_at=run.created_at,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=arguments["args"],
            kwargs=arguments["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        return task_result_get(result_id=result_id)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        known = set(getattr(settings, "SAS_QUEUES", []))
        return [
            checks.Error(
                f"TASKS[{self.alias!r}] routes queue {queue!r} to {agent_queue!r},"
                " which is not in SAS_QUEUES",
                hint="Name an agent queue a worker consumes (settings/monitoring.py SAS_QUEUES).",
                id="tasksbackend.E001",
            )
            for queue, agent_queue in sorted(self.routes.items())
            if agent_queue not in known
        ]

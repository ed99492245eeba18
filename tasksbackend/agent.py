"""The agent that runs a task's function: one Celery task per agent queue the backends route to,
`agents.<service>.django_task` (queue `agent.<service>`, agents/routing.py).

It is an `AgentTask`, so a task gets what every step gets: its request read from the state
store by (step, lease) - the function's module path, arguments and run id come from the step's
row, never from the message -, the attempt's window (a Celery soft time limit stops it at
complete-by), the fenced reply, the step's retries with backoff and the supervisor's sweep.
There is no remote service, so no circuit breaker, and one call per attempt: the step's policy
retries.

What a call raises: TransientFault, a lost database connection, ConnectionError, TimeoutError
and the task's own `retry_on` are transient (the step is tried again, up to its failure
budget); anything else is permanent (the step errors and the run ends, Failed for the
framework). Either way the error is recorded as `<exception class path>: <message>` and the
traceback, which the results read back as the framework's TaskError (`tasksbackend/results.py`).
"""

from __future__ import annotations

import logging
from typing import Any

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django_tasks.base import TaskContext
from django_tasks.utils import get_exception_traceback, get_module_path, normalize_json

from agents.base import AgentTask
from agents.breaker import NoBreaker
from agents.faults import PermanentFault, RetryPolicy, TransientFault
from agents.schedulable import DEFAULT_TRANSIENT

from .errors import TaskNotRegistered
from .registry import task_known, task_of_workflow, task_workflow_name

logger = logging.getLogger(__name__)

OPERATION_SUFFIX = "django_task"
# The engine keeps at most this much of an error (scheduler/sql: left(error, 4000)).
ERROR_MAX = 4000


def operation_for(agent_queue: str) -> str:
    """The agent operation that runs tasks on `agent_queue` ("agent.tasks" ->
    "agents.tasks.django_task")."""
    return f"agents.{agent_queue.removeprefix('agent.')}.{OPERATION_SUFFIX}"


def error_text(exc: BaseException) -> str:
    """How a task's exception is recorded: its class's path and message on the first line, then
    the traceback; cut to what the engine keeps."""
    text = f"{get_module_path(type(exc))}: {exc}\n{get_exception_traceback(exc)}"
    return text[:ERROR_MAX]


class DjangoTaskAgent(AgentTask):
    """Runs a framework task's function in this worker (see the module's docstring)."""

    service = "tasks"
    retry_policy = RetryPolicy(max_tries=1)

    def breaker(self, payload: dict[str, Any]) -> NoBreaker:
        return NoBreaker()

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        module_path = str(payload.get("task", ""))
        task = task_known(module_path)
        if task is None:
            # Never imported here: a module path is run only once its @task was evaluated in
            # this process (tasksbackend/registry.py).
            raise PermanentFault(
                f"{get_module_path(TaskNotRegistered)}: task {module_path!r} is not registered in this"
                " worker (is its module imported at start-up: <app>/tasks.py or the backend's MODULES?)"
            )
        known = task_of_workflow(
            task_workflow_name(alias=task.backend, queue_name=task.queue_name, module_path=module_path)
        )
        transient = known.transient if known is not None else DEFAULT_TRANSIENT
        args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
        try:
            if task.takes_context:
                value = task.call(_context(str(payload.get("result_id", ""))), *args, **kwargs)
            else:
                value = task.call(*args, **kwargs)
            return normalize_json(value)
        except (SoftTimeLimitExceeded, TransientFault, PermanentFault):
            raise
        except transient as exc:
            raise TransientFault(error_text(exc)) from exc
        except Exception as exc:
            logger.exception("task %s failed", module_path)
            raise PermanentFault(error_text(exc)) from exc


def _context(result_id: str) -> TaskContext:
    from .results import task_result_get

    return TaskContext(task_result=task_result_get(result_id=result_id))


_registered: set[str] = set()


def operation_register(agent_queue: str) -> str:
    """The Celery task that runs tasks on `agent_queue`, registered once per process."""
    name = operation_for(agent_queue)
    if name in _registered:
        return name
    service = agent_queue.removeprefix("agent.")
    base = type(f"DjangoTaskAgent_{service}", (DjangoTaskAgent,), {"service": service})

    def run(self: DjangoTaskAgent, **kwargs: Any) -> str:
        return self.perform(path="", **kwargs)

    run.__name__ = run.__qualname__ = f"django_task_{service}"
    shared_task(name=name, bind=True, base=base)(run)
    _registered.add(name)
    return name

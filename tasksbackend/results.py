"""A task's result, read from its run: the framework's TaskResult from the run, its one step and
the step's attempts (the state store's history). Reads only.

| run / step                                      | TaskResultStatus |
|-------------------------------------------------|------------------|
| run completed                                   | SUCCESSFUL       |
| run compensating, compensated, cancelled, failed | FAILED          |
| otherwise, step processing                      | RUNNING          |
| otherwise (pending: new, deferred, or waiting for its next attempt) | READY |

`enqueued_at` is the run's creation, `started_at` / `last_attempted_at` the first / last
attempt's start, `finished_at` the run's end; `worker_ids` one entry per attempt that ran (so
`attempts` counts them); `errors` one TaskError per failed attempt, oldest first; the return
value is the step's result (JSON).

Who may read: `task_result_get` is the framework's `get_result`, for code that holds a result
id (a run id: 74 random bits) - as every backend's is. A view that shows results to people asks
`task_result_for_owner`, which answers only the run's owner (another's is "does not exist",
never "forbidden"); the platform's own API (`/api/runs/<id>/progress/`) is owner-scoped too.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.db.models import Q
from django.utils.module_loading import import_string
from django_tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django_tasks.exceptions import TaskResultDoesNotExist
from django_tasks.utils import get_module_path

from scheduler.models import Run, Step, TaskExecutionHistory

from .errors import TaskStepError, TaskTimedOut
from .registry import WORKFLOW_PREFIX, task_backend_alias, task_module_path, task_of_workflow

_FAILED_RUN = (Run.State.COMPENSATING, Run.State.COMPENSATED, Run.State.CANCELLED, Run.State.FAILED)
_FAILED_ATTEMPT = (
    TaskExecutionHistory.Status.FAILED_TRANSIENT,
    TaskExecutionHistory.Status.FAILED_PERMANENT,
    TaskExecutionHistory.Status.TIMED_OUT,
)
# Attempt rows of an attempt that never ran the function (not started in time, stale, cancelled
# before it began).
_NOT_RUN = (
    TaskExecutionHistory.Status.REQUEUED,
    TaskExecutionHistory.Status.DEFERRED,
    TaskExecutionHistory.Status.IGNORED,
)
_CLASS_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)+$")


def task_result_get(*, result_id: str) -> TaskResult[Any]:
    """The result of the task run `result_id`, or TaskResultDoesNotExist (also for a run that is
    not a task's: an order's run is no task result)."""
    return _result(_run(result_id, Q()))


def task_result_for_owner(*, user: Any, result_id: str) -> TaskResult[Any]:
    """As `task_result_get`, for the run's owner only: another user's result does not exist."""
    if user is None or not getattr(user, "is_authenticated", False):
        raise TaskResultDoesNotExist(result_id)
    return _result(_run(result_id, Q(owner_id=user.pk)))


def _run(result_id: str, scope: Q) -> Run:
    try:
        run_id = uuid.UUID(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None
    run = Run.objects.filter(scope, pk=run_id, workflow__startswith=WORKFLOW_PREFIX).first()
    if run is None:
        raise TaskResultDoesNotExist(result_id)
    return run


def _task(run: Run) -> Task[Any, Any]:
    """The framework's Task of a task's run: the one registered in this process, else the one
    its module defines (the module path was checked against the registry when the run was
    written: only a registered task's workflow can be submitted)."""
    known = task_of_workflow(run.workflow)
    if known is not None:
        return known.task
    path = task_module_path(run.workflow)
    try:
        found = import_string(path)
    except ImportError:
        raise TaskResultDoesNotExist(str(run.id)) from None
    if not isinstance(found, Task) or found.backend != task_backend_alias(run.workflow):
        raise TaskResultDoesNotExist(str(run.id))
    return found


def _result(run: Run) -> TaskResult[Any]:
    task = _task(run)
    step = Step.objects.filter(run_id=run.id, kind=Step.Kind.FORWARD).order_by("seq").first()
    attempts = list(
        TaskExecutionHistory.objects.filter(
            run_id=run.id, kind=TaskExecutionHistory.Kind.ATTEMPT, started_at__gte=run.created_at
        )
        .exclude(status__in=_NOT_RUN)
        .order_by("started_at", "id")
        .only("status", "worker", "error", "started_at")
    )
    status = _status(run, step)
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=str(run.id),
        status=status,
        enqueued_at=run.created_at,
        started_at=attempts[0].started_at if attempts else None,
        last_attempted_at=attempts[-1].started_at if attempts else None,
        finished_at=run.finished_at
        if status in (TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED)
        else None,
        args=list(run.input.get("args", [])),
        kwargs=dict(run.input.get("kwargs", {})),
        backend=task.backend,
        errors=[_error(a) for a in attempts if a.status in _FAILED_ATTEMPT]
        or ([_engine_error(run, step)] if status == TaskResultStatus.FAILED else []),
        worker_ids=[a.worker or "unknown" for a in attempts],
    )
    if status == TaskResultStatus.SUCCESSFUL and step is not None:
        object.__setattr__(result, "_return_value", step.result)
    return result


def _status(run: Run, step: Step | None) -> TaskResultStatus:
    if run.state == Run.State.COMPLETED:
        return TaskResultStatus.SUCCESSFUL
    if run.state in _FAILED_RUN:
        return TaskResultStatus.FAILED
    if step is not None and step.process_state == Step.State.PROCESSING:
        return TaskResultStatus.RUNNING
    return TaskResultStatus.READY


def _error(attempt: TaskExecutionHistory) -> TaskError:
    """An attempt's recorded error as the framework's TaskError: the class path on its first
    line (tasksbackend/agent.py `error_text`), else the engine's own words."""
    text = attempt.error or ""
    head = text.split("\n", 1)[0].split(": ", 1)[0]
    if _CLASS_PATH.match(head):
        return TaskError(exception_class_path=head, traceback=text)
    kind = TaskTimedOut if attempt.status == TaskExecutionHistory.Status.TIMED_OUT else TaskStepError
    return TaskError(exception_class_path=get_module_path(kind), traceback=text or attempt.status)


def _engine_error(run: Run, step: Step | None) -> TaskError:
    """A failed run with no failed attempt (cancelled before it ran, its deadline passed)."""
    text = (step.last_error if step is not None else "") or run.error or run.state
    return TaskError(exception_class_path=get_module_path(TaskStepError), traceback=text)

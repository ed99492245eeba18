"""Plain `@task` functions of Django's task framework, run by the engine in the tests
(tests/tasksbackend/). The workers import this module at start-up (SAS_WORKFLOW_MODULES in
tests/conftest.py's `worker_env`), as a project's `<app>/tasks.py` is imported by Celery's
autodiscovery."""

from __future__ import annotations

import time
from pathlib import Path

from django_tasks import TaskContext, task


@task()
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@task()
def explode(message: str) -> None:
    raise ValueError(message)


@task(takes_context=True, backoff_base=0.2, backoff_max=0.5)
def flaky(context: TaskContext, marker: str) -> str:
    """Fails with a transient error on its first attempt, succeeds on the next."""
    with Path(marker).open("a") as f:
        f.write(f"attempt {context.attempt}\n")
    if context.attempt == 1:
        raise ConnectionError("the service went away")
    return f"ok on attempt {context.attempt}"


@task(timeout=3, backoff_base=0.2, backoff_max=0.5)
def slow_write(marker: str, seconds: float) -> str:
    """Writes 'started', sleeps, then writes 'done': a kill in between leaves no 'done'."""
    with Path(marker).open("a") as f:
        f.write("started\n")
    time.sleep(seconds)
    with Path(marker).open("a") as f:
        f.write("done\n")
    return "written"


@task()
def user_exists(username: str) -> bool:
    """Whether the user is there when the task runs (an enqueue's own transaction wrote it)."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.filter(username=username).exists()

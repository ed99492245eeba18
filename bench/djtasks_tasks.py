"""The bench's task functions (bench/djtasks.py): the same body on each backend. Every process
imports this module (SAS_WORKFLOW_MODULES for the engine's workers; django-tasks-db's worker
imports it by the task's path)."""

from __future__ import annotations

from django_tasks import task


def _echo(i: int) -> int:
    return i


@task()
def echo_engine(i: int) -> int:
    return _echo(i)


@task(backend="db")
def echo_db(i: int) -> int:
    return _echo(i)

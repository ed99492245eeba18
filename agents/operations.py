"""Declaring a remote operation: one call, in the domain app that owns it.

    reserve = remote_operation(name="agents.inventory.reserve", service="inventory",
                               path="/inventory/reserve")

registers a Celery task of that name that POSTs the step's payload to `path` on the service's
URL (settings.SAS["REMOTE_URLS"][service]) through `AgentTask.perform`: deadline, in-attempt
retries with jitter, the service's circuit breaker, the fenced reply. Its queue follows from
the name (`agents.<service>.<op>` -> `agent.<service>`, see `agents.routing`), so adding an
operation is this one line and the workflow step that names it.
"""

from __future__ import annotations

import sys
from typing import Any, cast

from celery import shared_task

from .base import AgentTask


def remote_operation(*, name: str, service: str, path: str) -> AgentTask:
    """Register the agent task `name` calling `path` on `service`."""
    prefix = f"agents.{service}."
    if not name.startswith(prefix):
        raise ValueError(f"operation {name!r} must be named {prefix}<operation> (its queue follows the name)")
    base = type(f"{service.title()}Agent", (AgentTask,), {"service": service})

    def operation(self: AgentTask, **kwargs: Any) -> str:
        return self.perform(path=path, **kwargs)

    operation.__name__ = operation.__qualname__ = name.rsplit(".", 1)[-1]
    operation.__doc__ = f"POST {path} on the {service} service (agent operation {name})."
    # The task belongs to the module that declares it, as a decorated function would (a test's
    # own operations are told apart by it: tests/ops/test_queues.py).
    operation.__module__ = sys._getframe(1).f_globals.get("__name__", __name__)
    # shared_task returns a proxy of the task; it is used as the task itself.
    return cast(AgentTask, shared_task(name=name, bind=True, base=base)(operation))

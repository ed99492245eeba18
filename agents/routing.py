"""Queue routing for agent operations: `agents.<service>.<op>` -> queue `agent.<service>`.

One queue per remote service (DESIGN.md) without a settings entry per operation or service:
a new service's operations route themselves. Celery calls this for every task it sends
(CELERY_TASK_ROUTES): https://docs.celeryq.dev/en/stable/userguide/routing.html#routers
"""

from __future__ import annotations

from typing import Any


def route_agent_task(
    name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any
) -> dict[str, str] | None:
    if name.startswith("agents."):
        parts = name.split(".")
        if len(parts) >= 3:
            return {"queue": f"agent.{parts[1]}"}
    return None

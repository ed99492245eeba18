"""The project's Celery app with the agents' issue-26 check taken out - for bench/agent_check.py
only, never deployed: `celery -A bench.agent_unchecked worker ...`.

An agent then acts on its message's own payload, idempotency key and deadlines, as before issue
26 (`AgentTask.held_request` returns the message unchanged, with no database lookup), so the
bench can run the engine with and without the check side by side, on the same code otherwise.
The switch is this module, not a setting: nothing a deployment configures can turn the check off.
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_init, worker_process_init

from sasproject.celery import app

__all__ = ["app"]


def _trust_the_message(**kwargs: Any) -> None:
    from agents.base import AgentTask

    def held_request(self: AgentTask, kwargs: dict[str, Any]) -> dict[str, Any]:
        return kwargs

    AgentTask.held_request = held_request  # type: ignore[method-assign]


# In the worker's main process (a threads or solo pool) and in each prefork child after fork.
worker_init.connect(_trust_the_message, weak=False)
worker_process_init.connect(_trust_the_message, weak=False)

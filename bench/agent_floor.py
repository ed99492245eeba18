"""The project's Celery app with the agents' issue-26 check replaced by its floor - for
bench/agent_check.py only, never deployed: `celery -A bench.agent_floor worker ...`.

The floor is the least work any check against the state store must do before an agent's remote
call: one round trip to PostgreSQL on the worker's connection (`SELECT 1`) for a request that
came through the broker, after which the agent acts on its message as the unchecked variant
does. A step the worker claimed itself and runs in place needs no round trip (agents/eager.py),
here as in the checked variant. A check that item 6 of issue 26 also
asks of (a cancelled run's queued step never makes its call) cannot skip it: only the state
store knows the run was cancelled after the message was queued. A signature would prove who
made a message, not that its step is still held.
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_init, worker_process_init

from sasproject.celery import app

__all__ = ["app"]


def _one_round_trip(**kwargs: Any) -> None:
    from django.db import connection

    from agents.base import AgentTask
    from agents.eager import claim_in_place

    def held_request(self: AgentTask, kwargs: dict[str, Any]) -> dict[str, Any]:
        if claim_in_place(step_id=kwargs["step_id"], lease=kwargs["lease"], operation=self.name):
            return kwargs
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        return kwargs

    AgentTask.held_request = held_request  # type: ignore[method-assign]


# In the worker's main process (a threads or solo pool) and in each prefork child after fork.
worker_init.connect(_one_round_trip, weak=False)
worker_process_init.connect(_one_round_trip, weak=False)

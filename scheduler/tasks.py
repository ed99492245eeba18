"""Scheduler tasks: thin wrappers that take ids and call services (Celery's tasks-as-views habit)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from django.conf import settings
from django.db import DatabaseError

from sasproject.redis_client import get_redis

from . import services

# The jobs dispatcher's tick lives in its room; imported here so Celery's autodiscovery (which
# imports each app's `tasks`) registers it.
from .dispatcher.tasks import jobs_dispatch_task
from .messages import message_step_label, reply_problem

logger = logging.getLogger(__name__)

__all__ = ["bench_noop", "jobs_dispatch_task", "scheduler_kick", "scheduler_reply", "scheduler_tick"]


def _pump_all(instance: str) -> int:
    """Claim and dispatch until a batch comes back short (bounded: 50 batches per call)."""
    limit = settings.SAS["CLAIM_BATCH"]
    total = 0
    for _ in range(50):
        claimed = services.scheduler_pump(instance=instance, limit=limit)
        total += claimed
        if claimed < limit:
            break
    return total


@shared_task(name="scheduler.kick", ignore_result=True)
def scheduler_kick() -> int:
    """Sent after a submit commits (and after compensation starts): claim what is due now."""
    # Clear the coalescing flag first: a submit that commits from now on sends a new kick.
    try:
        get_redis().delete(services.kick_pending_key())
    except Exception:
        logger.warning("could not clear the kick flag", exc_info=True)
    try:
        return _pump_all(services.scheduler_instance_id())
    except DatabaseError:
        # The tick will try again; a kick is an optimisation, never the only path.
        logger.exception("scheduler kick failed")
        return 0


# The periodic tasks send no task events (send_events=False): one to three a second would bury
# the agents' tasks in Flower (issue 19). Liveness records each one's last success instead
# (liveness/last_run.py), which the engine-health page and /metrics show.
@shared_task(name="scheduler.tick", ignore_result=True, send_events=False)
def scheduler_tick() -> int:
    """Periodic safety net (django-celery-beat): picks up work whose kick was lost, and steps
    whose backoff `not_before` has come."""
    try:
        return _pump_all(services.scheduler_instance_id())
    except DatabaseError:
        logger.exception("scheduler tick failed; next tick retries")
        return 0


@shared_task(name="bench.noop", ignore_result=False)
def bench_noop(counter_key: str = "") -> None:
    """A task that does nothing (but count itself): bench/ measures the bare Celery cost with it,
    so the engine's cost can be stated as a ratio on the same machine and worker settings."""
    if counter_key:
        get_redis().incr(counter_key)


class ReplyTask(Task):
    """scheduler.reply's base: a malformed reply (wrong types, unknown fields, an oversized
    result, a lease that is no UUID) is logged and dropped before the service sees it
    (scheduler/messages.py); acknowledged, so it cannot loop."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        problem = reply_problem(args, kwargs)
        if problem is not None:
            logger.error("reply for step %s dropped: %s", message_step_label(kwargs), problem)
            return "invalid"
        return super().__call__(*args, **kwargs)


@shared_task(name="scheduler.reply", ignore_result=True, base=ReplyTask)
def scheduler_reply(
    *,
    step_id: int,
    lease: str,
    outcome: str,
    result: Any = None,
    error: str = "",
    worker: str = "",
    retry_after: float = 0.0,
    reached: bool = False,
) -> str:
    """An agent's reply, in "queue" reply mode. Fenced by the lease in the service."""
    return services.step_reply(
        step_id=step_id,
        lease=lease,
        outcome=outcome,  # type: ignore[arg-type]
        result=result,
        error=error,
        worker=worker,
        retry_after=retry_after,
        reached=reached,
    )

"""Eager next steps: a step claimed by a reply runs in place when this worker serves its queue.

A success reply claims the run's next step in the same statement (`scheduler.services.reply`),
and the claim would then be published to the next operation's queue, for some worker to pick
up. When the worker that just replied consumes that queue itself, the round trip through the
broker buys nothing: the publish, the worker's hand-off of the message to a pool process, and
the acknowledgement. So the agent task keeps that claim (`claims_kept`) and, once its own step
is done, calls the claimed operation's task right here - as Temporal's "eager activity
execution" does for an activity on the worker's own task queue.

Nothing else changes: the claim was committed first (Processing, its lease and deadlines), the
called task is the same agent with the same fence, retries, breaker and reply. What is not run
in place (an error, a time limit) is published as usual before the task returns; if the process
dies first, the claim's start_by passes unmarked and the supervisor sends it again with no
failure counted. Bulkhead workers (one queue per remote service, the Procfile's layout) never
serve the next step's queue, so there every step still goes through the broker.

Limits:
- `SAS["EAGER_STEPS"]` steps at most per task (0 turns this off), so that one message does not
  hold a pool process for a whole backlog while other queues' messages wait;
- only when the step's whole window (its timeout) ends before this task's own soft time limit
  (prefork's Celery limits were set for the task's first step), with a margin;
- not a heartbeat step (its window moves; its limits are its own);
- only in a worker (a task called directly, as tests do, runs its own step only).

Flower shows the task of the first step; the steps run in place after it appear in the
worker's log ("ran in place") and, like every step, in the run's history.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from celery import Task
from django.conf import settings

from scheduler.services import Claim, claims_dispatch, claims_kept

logger = logging.getLogger(__name__)

# A step run in place must end (its timeout) this long before the task's soft time limit.
TIME_LIMIT_MARGIN = 0.5

_queue_of: dict[str, str | None] = {}
# Set while a task runs its next steps: the steps it calls keep theirs for its loop.
_running: ContextVar[bool] = ContextVar("sas_eager_running", default=False)
# The claim being run in place: the agent's request as the claim statement returned it from the
# state store, in this process - the agent needs no lookup to trust it (`claim_in_place`).
_in_place: ContextVar[Claim | None] = ContextVar("sas_eager_in_place", default=None)


def claim_in_place(*, step_id: Any, lease: Any, operation: str) -> Claim | None:
    """The claim this process is running in place, if it is this step under this lease for this
    operation, else None. Its fields came from the claim's own statement (committed, Processing
    under that lease), never from a message, so they are what `step_request_held` would load a
    moment later: the agents' issue-26 check takes them as held, and a step run in place costs
    no second read of the row its claim just returned (bench/agent_check.py)."""
    claim = _in_place.get()
    if claim is None or claim.operation != operation or claim.lease != str(lease):
        return None
    return claim if str(claim.step_id) == str(step_id) else None


def _operation_queue(task: Task, operation: str) -> str | None:
    """The queue `operation`'s requests are routed to (the app's router, as for a publish)."""
    if operation not in _queue_of:
        try:
            route = task.app.amqp.router.route({}, operation, args=(), kwargs={})
            queue = route.get("queue")
            _queue_of[operation] = getattr(queue, "name", queue)
        except Exception:
            logger.warning("no route for %s; its steps go through the broker", operation, exc_info=True)
            _queue_of[operation] = None
    return _queue_of[operation]


def _served_here(task: Task, operation: str) -> bool:
    if operation not in task.app.tasks:
        return False
    queue = _operation_queue(task, operation)
    # consume_from is the worker's -Q selection (None: it consumes every declared queue).
    consumed = task.app.amqp.queues.consume_from
    if consumed is None:
        consumed = task.app.amqp.queues
    return queue is not None and queue in consumed


def _soft_deadline(task: Task, started: float) -> float | None:
    """When this task's soft time limit fires (monotonic clock), or None when it has none."""
    limits = task.request.timelimit or (None, None)
    soft = limits[1] if len(limits) > 1 else None
    if soft is None:
        soft = task.soft_time_limit or task.app.conf.task_soft_time_limit
    return started + float(soft) if soft else None


def run_with_next_steps(task: Task, call: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Run the task (`call`), then the steps its replies claimed that may run here."""
    budget = int(settings.SAS["EAGER_STEPS"])
    if budget <= 0 or task.request.called_directly or _running.get():
        return call(*args, **kwargs)
    started = time.monotonic()
    soft_deadline = _soft_deadline(task, started)
    taken = 0

    def accepts(claim: Claim) -> bool:
        nonlocal taken
        if taken >= budget or claim.heartbeat or not _served_here(task, claim.operation):
            return False
        if soft_deadline is not None and time.monotonic() + claim.timeout + TIME_LIMIT_MARGIN > soft_deadline:
            return False
        taken += 1
        return True

    token = _running.set(True)
    unrun: list[Claim] = []
    try:
        with claims_kept(accepts) as kept:
            try:
                result = call(*args, **kwargs)
                while kept:
                    claim = kept.pop(0)
                    logger.info("step %s (%s): ran in place, no broker hop", claim.step_id, claim.operation)
                    in_place = _in_place.set(claim)
                    try:
                        task.app.tasks[claim.operation](**claim.message())
                    except Exception:
                        # As for a task that raised: the step stays Processing, and the
                        # supervisor takes it back at its deadline.
                        logger.exception("step %s: the step run in place raised", claim.step_id)
                    finally:
                        _in_place.reset(in_place)
            finally:
                unrun = list(kept)
                kept.clear()
    finally:
        _running.reset(token)
        if unrun:
            # Not run here (an exception, a time limit): published as any claim, now that the
            # keeper is gone.
            claims_dispatch(unrun)
    return result

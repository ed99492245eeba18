"""Claim and dispatch: the scheduler's half of the request channel.

Claims are transitions (`scheduler.transitions`); this module sends what was claimed to the
agents' queues after commit, kicks schedulers, and keeps in-flight work per operation bounded.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import models, transaction

from sasproject.logs import state_change
from sasproject.redis_client import get_redis
from scheduler import clock, transitions
from scheduler.models import Step
from scheduler.transitions import Claim, Transitioned

from .events import events_announce

logger = logging.getLogger(__name__)


def scheduler_instance_id() -> str:
    """Who claims: host and process. Stored in `locked_by`; tells operators which process held a step."""
    return f"{socket.gethostname()}:{os.getpid()}"


KICK_PENDING_KEY = "sas:scheduler:kick-pending"


def kick_pending_key() -> str:
    return f"{settings.REDIS_PREFIX}{KICK_PENDING_KEY}"


def scheduler_kick_enqueue(countdown: float = 0.0) -> None:
    """Ask a scheduler to claim now (or in `countdown` seconds, when a backoff ends). Best
    effort: losing it only delays work until the periodic tick.

    Immediate kicks are coalesced: while one is queued and not yet started (a Redis flag that
    the kick task clears when it starts), more submits do not queue more - a burst of 1,000
    orders costs a handful of kicks, not 1,000 (which would also sit in front of replies on the
    scheduler queue). The flag expires after 2 s in case a kick message is lost.
    """
    try:
        if not countdown and not get_redis().set(kick_pending_key(), "1", nx=True, px=2000):
            return
    except Exception:
        logger.warning("kick coalescing unavailable (Redis); sending the kick anyway", exc_info=True)
    try:
        current_app.send_task("scheduler.kick", ignore_result=True, countdown=countdown or None)
    except Exception:
        logger.warning("scheduler kick not sent; the periodic tick will pick the work up", exc_info=True)


@dataclass
class _Keeper:
    accepts: Callable[[Claim], bool]
    kept: list[Claim] = field(default_factory=list)


_keeper: ContextVar[_Keeper | None] = ContextVar("sas_claims_keeper", default=None)


@contextmanager
def claims_kept(accepts: Callable[[Claim], bool]) -> Iterator[list[Claim]]:
    """While active (in this thread), `claims_dispatch` keeps the first claim of each call that
    `accepts` approves: it is appended to the yielded list instead of being published. An agent
    worker that serves that claim's queue runs it in place, with no broker hop (`agents.eager`).

    Invariant: a kept claim is already committed (Processing, with its lease and deadlines), as
    any dispatched one; the caller must run or `claims_dispatch` every claim it kept. One that
    is neither (the process died) has no message: its start_by passes unmarked, and the
    supervisor sends it again with no failure counted, as for a lost publish.
    """
    keeper = _Keeper(accepts)
    token = _keeper.set(keeper)
    try:
        yield keeper.kept
    finally:
        _keeper.reset(token)


def claims_dispatch(claims: Sequence[Claim]) -> int:
    """Send each claim to its agent queue; the message expires at the step's complete-by.
    Inside `claims_kept`, the first claim its caller accepts is kept instead.

    A failed publish is logged and left alone: the step is Processing with a deadline, so the
    supervisor returns it to Pending once the deadline passes. Returns how many were sent.
    """
    sent = 0
    keeper = _keeper.get()
    for claim in claims:
        now = clock.now()
        remaining = (claim.complete_by - now).total_seconds()
        if remaining <= 0:
            continue
        if keeper is not None and keeper.accepts(claim):
            keeper.kept.append(claim)
            keeper = None  # one per call: the rest of a batch goes to the queues
            _claim_logged(claim, "step_kept", "kept to run in place")
            continue
        # Celery's time limits for the attempt: up to complete-by - or, for a heartbeat step
        # (whose heartbeats move complete-by on), up to its whole deadline; none set (the
        # global CELERY_TASK_*_TIME_LIMIT) when it has none.
        limit: float | None = remaining
        if claim.heartbeat:
            limit = (claim.close_by - now).total_seconds() if claim.close_by else None
        limits: dict[str, Any] = (
            {"soft_time_limit": max(1, math.ceil(limit)), "time_limit": max(1, math.ceil(limit)) + 2}
            if limit is not None
            else {}
        )
        try:
            current_app.send_task(
                claim.operation,
                kwargs=claim.message(),
                expires=claim.complete_by,
                # Nest inside the deadline: the soft limit fires at complete-by if the agent's
                # own deadline checks did not stop it; the hard limit kills a stuck child 2s later.
                **limits,
                ignore_result=True,
                # What Flower and the worker's log show for the request: its ids, not its
                # payload (a card token has no place on a dashboard) - and a fixed string is
                # far cheaper than Celery's saferepr of the whole message, on every step.
                argsrepr="()",
                kwargsrepr=request_repr(claim),
            )
            sent += 1
            _claim_logged(claim, "step_dispatched", "sent to its agent")
        except Exception:
            logger.exception("dispatch of step %s failed; supervisor will recover it", claim.step_id)
    return sent


def _claim_logged(claim: Claim, event: str, what: str) -> None:
    state_change(
        event,
        "step %s (%s) of run %s, attempt %d: %s",
        claim.step_id,
        claim.operation,
        claim.run_id,
        claim.attempt,
        what,
        run=claim.run_id,
        step=claim.step_id,
        lease=claim.lease,
        attempt=claim.attempt,
        operation=claim.operation,
    )


def request_repr(claim: Claim) -> str:
    """A step request as Flower and the logs show it: ids and attempt, no payload."""
    return (
        f"{{'step_id': {claim.step_id}, 'run_id': {claim.run_id!r}, 'name': {claim.name!r}, "
        f"'attempt': {claim.attempt}, 'complete_by': {claim.complete_by.isoformat()!r}}}"
    )


def claimed_settle(done: Transitioned, *, dispatch: bool = True) -> list[Claim]:
    """After a claim: announce its events now (in the transaction); with `dispatch`, send the
    claims to their agents after commit."""
    events_announce(done.events)
    claims = done.claims
    if claims and dispatch:
        transaction.on_commit(lambda: claims_dispatch(claims))
    return claims


def step_claim_due(
    *,
    instance: str,
    limit: int,
    run_id: uuid.UUID | str | None = None,
    exclude_operations: Sequence[str] | None = None,
    operation: str | None = None,
) -> list[Claim]:
    """Atomically claim up to `limit` due Pending steps for `instance`. The caller dispatches
    them (`claims_dispatch`, after commit) - or is a test playing the agent.

    Invariant: two schedulers never claim the same step (`FOR UPDATE SKIP LOCKED` and the state
    change in one statement); highest priority first, and within a priority fair between owners:
    the owner with the fewest steps of the operation in flight first, then earliest run deadline
    (`sas_step_pick`, docs/operating/fairness.md). Each claim gets a fresh lease and
    `complete_by = now() + timeout` from the database clock.
    Transaction: the caller's.
    """
    return claimed_settle(
        transitions.step_claim_many(
            instance=instance,
            limit=limit,
            operation=operation,
            exclude_operations=exclude_operations,
            run_id=run_id,
        ),
        dispatch=False,
    )


def operations_in_flight() -> dict[str, int]:
    """Processing steps per agent operation (served by the partial index on Processing rows)."""
    rows = (
        Step.objects.filter(process_state=Step.State.PROCESSING)
        .values_list("operation")
        .annotate(n=models.Count("id"))
    )
    return dict(rows)


def scheduler_pump(*, instance: str, limit: int, run_id: uuid.UUID | str | None = None) -> int:
    """Claim a batch and dispatch it after commit. Returns the number claimed.

    Backpressure: a step is claimed only into a free slot of its bulkhead (its agent queue's
    workers' threads, scheduler/bulkheads.py; `sas_step_pick`). A claim starts the step's
    complete-by clock, and a message beyond the threads would wait in the broker's first-in,
    first-out queue, where the fair order no longer holds (docs/operating/fairness.md).
    """
    with transaction.atomic():
        claims = step_claim_due(instance=instance, limit=limit, run_id=run_id)
        if claims:
            transaction.on_commit(lambda: claims_dispatch(claims))
    return len(claims)

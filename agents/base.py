"""The agent: one Celery task per remote operation, all sharing this base. Its faults are in
`agents/faults.py`, the remote services' HTTP client in `agents/remote.py`, the loading of the
step a request names in `agents/held.py`.

An agent request carries step id, lease, complete-by, idempotency key and payload. The agent:
- trusts only the state store (issue 26): before anything else it loads the step's payload,
  idempotency key and deadlines by (step id, lease), while the step is Processing under that
  lease for this operation (`scheduler.selectors.step_request_held`), and acts on those; a
  request for which no step is held - forged, replayed, altered, or its run cancelled or
  deleted - is dropped, logged and counted, and nothing is called. The message's own payload
  and deadlines are never used (they stay in it for older workers). A step this process claimed
  itself and runs in place (agents/eager.py) is held as its claim statement returned it: no
  message was involved, and no second read is needed;
- drops the request unread if complete-by has passed;
- calls the remote service with the idempotency key, an HTTP timeout bounded by the time left;
- retries transient faults (timeouts, connection errors, 5xx, 429) with exponential backoff and
  jitter, never past complete-by;
- fails fast while the service's circuit breaker (shared through Redis) is open;
- counts any error of a call as the breaker's failure, an unexpected one (not a Transient- or
  PermanentFault: a bug, a lost database) too, replied as transient (`_unexpected_reply`), so a
  half-open probe is always released;
- replies success or a permanent fault (4xx: a declined card) to the scheduler; replies
  "transient" only when its own retries are spent with time still left (so the scheduler can
  retry sooner than the supervisor would); and, once complete-by has passed, stops and replies
  nothing - by then the supervisor may have handed the step to another agent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery import Task, current_app
from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection

from liveness.counters import agent_request_refused, attempt_observe
from sasproject.logs import log_context
from scheduler import clock
from scheduler.attempts import StartMark
from scheduler.messages import agent_request_problem, message_step_label
from scheduler.selectors import step_request_held
from scheduler.services import scheduler_instance_id, step_reply

from .breaker import HALF_OPEN, CircuitBreaker, NoBreaker
from .eager import claim_in_place, run_with_next_steps
from .faults import PermanentFault, RetryPolicy, TransientFault
from .held import request_loaded
from .remote import remote_post
from .request import AgentRequest

logger = logging.getLogger(__name__)


class AttemptFailed(Exception):
    """Raised by an agent task, in a worker, after its attempt's reply was recorded (or after it
    gave up without one), when the attempt did not succeed: Flower and Celery's events then show
    the task as FAILURE with the reason (a declined card, a 503 of an outage) instead of SUCCESS.

    It changes nothing in the engine: the reply is already durable when it is raised (the fenced
    reply committed, or in "queue" mode its message published), Celery does not retry an agent
    (max_retries = 0, no autoretry), and with acks_late a task that raised is still acknowledged
    (task_acks_on_failure_or_timeout, on by default), so the message is never delivered again.
    It is listed in `AgentTask.throws`, so the worker logs it on one INFO line, not as an error
    with a traceback. Tasks called directly (tests, steps run in place) return as before."""


# Outcomes of an attempt that Flower shows as failed (every one but a success or a page done):
# its reply's, or why it sent none - past its deadline, dropped unread, or (a long step) its
# lease taken back while it worked.
FAILED_OUTCOMES = frozenset({"permanent", "transient", "deferred", "deadline", "dropped", "lease_lost"})


@dataclass
class _Attempt:
    outcome: str = ""
    error: str = ""


# The attempt `perform` is running (its reply's outcome lands here) and, for a task run by a
# worker, the first attempt's outcome - the one the task's Celery state reports.
_attempt: ContextVar[_Attempt | None] = ContextVar("sas_agent_attempt", default=None)
_task_attempt: ContextVar[_Attempt | None] = ContextVar("sas_agent_task_attempt", default=None)
# When the task's message was published (the sas_sent_at header, sasproject/celery.py), for the
# schedule-to-start histogram; None for a step run in place or a task called directly.
_sent_at: ContextVar[float | None] = ContextVar("sas_agent_sent_at", default=None)


class AgentTask(Task):
    """Base for agent tasks. Subclasses set `service` (the remote service and breaker name)."""

    service: str = ""
    retry_policy = RetryPolicy()
    # Upper bound of one HTTP call even when the step's window is longer.
    http_timeout_cap = 30.0
    # Replies are our own protocol, not Celery retries: never let Celery retry an agent.
    max_retries = 0
    ignore_result = True
    # An attempt that failed ends the task with AttemptFailed once its reply is recorded: an
    # expected error (logged at INFO, no traceback), shown as FAILURE in Flower.
    throws = (AttemptFailed,)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # A malformed request (forged, truncated, from another release) is dropped before any
        # of it is used: logged, acknowledged, nothing called or written (scheduler/messages.py).
        problem = agent_request_problem(args, kwargs)
        if problem is not None:
            logger.error(
                "agent request to %s for step %s dropped: %s", self.name, message_step_label(kwargs), problem
            )
            agent_request_refused(operation=self.name, reason="malformed")
            return "invalid"
        if self.request.called_directly:
            return run_with_next_steps(self, super().__call__, args, kwargs)
        # Run by a worker: the first attempt's outcome becomes the task's state.
        sent_at = getattr(self.request, "sas_sent_at", None)
        first = _Attempt()
        tokens = (_task_attempt.set(first), _sent_at.set(float(sent_at) if sent_at else None))
        try:
            # Steps that its replies claim and that this worker serves run right after it, in
            # place (agents/eager.py).
            result = run_with_next_steps(self, super().__call__, args, kwargs)
        finally:
            _task_attempt.reset(tokens[0])
            _sent_at.reset(tokens[1])
        if first.outcome in FAILED_OUTCOMES:
            raise AttemptFailed(f"{first.outcome}: {first.error}" if first.error else first.outcome)
        return result

    def perform(self, **kwargs: Any) -> str:
        """One attempt (`_perform`), observed (`observed`)."""
        return self.observed(self._perform, kwargs)

    def held_request(self, kwargs: dict[str, Any]) -> dict[str, Any] | None:
        """The request as the state store holds it: the message's ids and fence, with the
        payload, idempotency key, deadlines and attempt loaded from the step it names - or None
        (logged and counted) when no step of this operation is Processing under that lease."""
        step_id, lease = kwargs["step_id"], kwargs["lease"]
        # A step this process claimed and runs in place (agents/eager.py) is held as its claim
        # returned it; only a request that came through the broker is looked up.
        here = claim_in_place(step_id=step_id, lease=lease, operation=self.name)
        if here is not None:
            return {**{k: v for k, v in kwargs.items() if k != "heartbeat"}, **here.message()}
        held = request_loaded(lambda: step_request_held(step_id=step_id, lease=lease, operation=self.name))
        if held is None:
            agent_request_refused(operation=self.name, reason="not_held")
            logger.warning(
                "agent request to %s for step %s refused: no step of this operation is Processing"
                " under lease %s (forged, replayed, or taken back); nothing called",
                self.name,
                message_step_label(kwargs),
                str(lease)[:40],
            )
            return None
        # The message's own `heartbeat` goes too: only a heartbeat step's stored window counts.
        return {**{k: v for k, v in kwargs.items() if k != "heartbeat"}, **held.request()}

    def observed(self, attempt: Callable[[AgentRequest], str], kwargs: dict[str, Any]) -> str:
        """Run one attempt, `attempt(request)`, and count it in the engine's metrics
        (liveness/counters.py): its outcome, its time at work and its time in the queue. Its
        outcome is the first attempt's of a task run by a worker, so the task's Celery state
        (Flower's) says whether it failed. Every kind of agent goes through here: the short ones
        (`perform`) and the long steps' pages and heartbeat work (agents/long.py) - and so every
        kind acts only on the request the state store holds (`held_request`), or not at all."""
        request = self.held_request(kwargs)
        if request is None:
            return "refused"
        record = _Attempt()
        token = _attempt.set(record)
        sent_at = _sent_at.get()
        _sent_at.set(None)  # steps run in place after this one did not wait in a queue
        started = time.monotonic()
        queued = time.time() - sent_at if sent_at is not None else None
        try:
            result = attempt(AgentRequest(**request))
        finally:
            _attempt.reset(token)
        if not record.outcome:
            record.outcome = result if result in FAILED_OUTCOMES else "success"
        attempt_observe(
            operation=self.name, outcome=record.outcome, seconds=time.monotonic() - started, queued=queued
        )
        first = _task_attempt.get()
        if first is not None and not first.outcome:
            first.outcome, first.error = record.outcome, record.error
        return result

    def _perform(self, request: AgentRequest) -> str:
        # Every line this attempt logs (its tries, its reply's state change) names its step,
        # lease and attempt (sasproject/logs.py: the JSON format's fields).
        with log_context(
            step=request.step_id, lease=request.lease, attempt=request.attempt, operation=self.name
        ):
            return self._perform_attempt(request)

    def _perform_attempt(self, request: AgentRequest) -> str:
        window = request.window(timeout=request.timeout)
        if window is None:
            return "dropped"
        # Marked started in the round trip of the first breaker check (or on its own, if the
        # attempt ends before it).
        return self._tries(request, deadline=window.deadline, mark=window.mark)

    def _tries(self, request: AgentRequest, *, deadline: datetime, mark: StartMark | None) -> str:
        """Tries of one attempt until a reply or `deadline`: breaker first, retries with backoff."""
        step_id, lease, payload = request.step_id, request.lease, request.payload
        breaker = self.breaker(payload)
        policy = self.retry_policy
        tries = 0
        reached = False
        try:
            while True:
                remaining = (deadline - clock.now()).total_seconds()
                if remaining <= policy.min_call_window:
                    if mark is not None:
                        mark.set()
                    logger.info("step %s: deadline reached after %d tries; no reply", step_id, tries)
                    return "deadline"
                decision = breaker.allow(mark=mark)
                mark = None
                if not decision.allowed:
                    # Fail fast, and come back at the breaker's next probe. Unless an earlier
                    # try of this attempt reached the service, it costs no failure budget.
                    return self._reply(
                        step_id,
                        lease,
                        deadline,
                        "transient" if reached else "deferred",
                        error=f"circuit open for {self.service}",
                        retry_after=decision.retry_after,
                    )
                tries += 1
                try:
                    result = self.call_remote(
                        path=request.path,
                        payload=payload,
                        idempotency_key=request.idempotency_key,
                        timeout=min(self.http_timeout_cap, remaining - policy.min_call_window / 2),
                    )
                except PermanentFault as exc:
                    if not decision.clean:
                        breaker.record_success()  # the service is up; it just said no
                    return self._reply(step_id, lease, deadline, "permanent", error=str(exc))
                except TransientFault as exc:
                    breaker.record_failure()
                    reached = reached or exc.reached
                    stop = self._transient_stop(
                        exc,
                        step_id,
                        lease,
                        deadline,
                        tries=tries,
                        reached=reached,
                        probe=decision.state == HALF_OPEN,
                    )
                    if stop is not None:
                        return stop
                    clock.sleep(policy.delay(tries))
                    continue
                except SoftTimeLimitExceeded:
                    # The call was still running at the deadline: a timeout, for the breaker
                    # too (a half-open probe must not stay held until its probe timeout).
                    breaker.record_failure()
                    raise
                except Exception as exc:  # every other error: `_unexpected_reply`
                    return self._unexpected_reply(step_id, lease, deadline, breaker, exc)
                if not decision.clean:
                    breaker.record_success()
                return self._reply(step_id, lease, deadline, "success", result=result)
        except SoftTimeLimitExceeded:
            logger.warning("step %s: soft time limit hit at the deadline; no reply", step_id)
            return "deadline"

    def _transient_stop(
        self,
        exc: TransientFault,
        step_id: int,
        lease: str,
        deadline: datetime,
        *,
        tries: int,
        reached: bool,
        probe: bool,
    ) -> str | None:
        """After a try that ended in a transient fault: how the attempt ends (its reply's outcome,
        or "deadline" for none), or None when there is time for another try after the backoff."""
        policy = self.retry_policy
        if probe:
            # This call was the open breaker's probe, and the service is still down: the
            # breaker's business, not the step's - no failure counted (the step's whole deadline
            # bounds the wait). It may have reached the service, so the step stays one to
            # compensate.
            return self._reply(
                step_id,
                lease,
                deadline,
                "deferred",
                error=f"probe failed, circuit open for {self.service}: {exc}",
                retry_after=self.breaker_retry_after(),
                reached=reached,
            )
        logger.info("step %s try %d: %s", step_id, tries, exc)
        pause = policy.delay(tries)
        left = (deadline - clock.now()).total_seconds()
        if tries >= policy.max_tries:
            if left > policy.min_call_window:
                outcome = "transient" if reached else "deferred"
                return self._reply(step_id, lease, deadline, outcome, error=str(exc), retry_after=pause)
            return "deadline"
        if pause + policy.min_call_window >= left:
            logger.info("step %s: no time left for another try; no reply", step_id)
            return "deadline"
        return None

    def _unexpected_reply(
        self,
        step_id: int,
        lease: str,
        deadline: datetime,
        breaker: CircuitBreaker | NoBreaker,
        exc: Exception,
    ) -> str:
        """A call that raised neither TransientFault nor PermanentFault (a bug, a value httpx
        cannot encode, a lost database connection): it counts as the breaker's failure - so a
        half-open probe is released, not held until its probe timeout - and the step gets a
        transient reply at once: one failure counted, retried after backoff, Error at its
        limit, instead of being held for its whole window. `reached` is assumed (it may have
        been sent), and the error is not retried inside the attempt: a bug repeats."""
        breaker.record_failure()
        logger.exception("step %s: unexpected error in %s", step_id, self.name)
        return self._reply(
            step_id,
            lease,
            deadline,
            "transient",
            error=f"unexpected error in the agent: {exc.__class__.__name__}: {exc}",
            retry_after=self.retry_policy.delay(1),
            reached=True,
        )

    # Extension points for agents that call something other than a configured service (the
    # webhook agent posts signed bodies to each subscriber's URL): everything else in `perform`
    # - deadline, retries with jitter, breaker, fenced reply - stays the same.
    def breaker(self, payload: dict[str, Any]) -> CircuitBreaker | NoBreaker:
        """The circuit breaker this call goes through (`breaker_name`)."""
        return CircuitBreaker(self.breaker_name(payload))

    def breaker_name(self, payload: dict[str, Any]) -> str:
        """The circuit breaker this call goes through; one per remote service by default."""
        return self.service

    def breaker_retry_after(self) -> float:
        """Seconds until the breaker lets a probe through again (its reset timeout)."""
        return float(settings.SAS["BREAKER_RESET_TIMEOUT"])

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        """One call to the remote; raises TransientFault / PermanentFault. Returns the result."""
        return remote_post(
            service=self.service, path=path, body=payload, idempotency_key=idempotency_key, timeout=timeout
        )

    def _reply(
        self,
        step_id: int,
        lease: str,
        deadline: datetime,
        outcome: str,
        *,
        result: Any = None,
        error: str = "",
        retry_after: float = 0.0,
        reached: bool = False,
    ) -> str:
        if clock.now() >= deadline:
            # The pattern's rule: past complete-by the agent says nothing, not even an error.
            return "deadline"
        record = _attempt.get()
        if record is not None:
            record.outcome, record.error = outcome, error[:500]
        # The reply's fields, the same whichever way it travels (scheduler.reply's arguments).
        fields: dict[str, Any] = {
            "step_id": step_id,
            "lease": lease,
            "outcome": outcome,
            "result": result,
            "error": error,
            "worker": scheduler_instance_id(),
            "retry_after": retry_after,
            "reached": reached,
        }
        if settings.SAS["REPLY_MODE"] == "queue":
            # No `expires` on the reply: a reply that reaches the scheduler after complete-by
            # must still be read, so the reply service records it as ignored (history kind
            # late_reply) instead of Celery discarding it unseen. The fence makes it harmless.
            current_app.send_task("scheduler.reply", kwargs=fields, ignore_result=True)
            return outcome

        def reply() -> str:
            return step_reply(**fields)

        try:
            return reply()
        except (InterfaceError, OperationalError):
            if connection.in_atomic_block or (connection.connection is not None and connection.is_usable()):
                raise
            # The process's connection died while idle (PostgreSQL restarted): workers do not
            # health-check it before every task (sasproject/celery.py), so the reply - the one
            # write that matters - reconnects once. Safe to repeat: the reply is fenced, so a
            # first attempt that committed makes this one "ignored".
            logger.warning("step %s: database connection lost; replying again on a new one", step_id)
            connection.close()
            return reply()

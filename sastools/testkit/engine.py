"""The harness: a workflow's runs through the real engine, in the test's process and database.

What is real: the state machine (every transition is the engine's SQL), the database (the test's
transaction, pytest-django's `db`), the agent tasks' bodies (`AgentTask.perform`: deadlines,
tries, breaker, fenced reply), the supervisor's sweep, the jobs dispatcher. What is not there:
a broker and worker processes - the harness is both. It delivers each claimed step to its agent
task's body, in-process, as a worker would (its lease, from the state store), pumps the
scheduler, sweeps on demand, and moves a virtual clock (`clock.py`) to the next deadline,
backoff or cron occurrence instead of waiting for it. Remote services are fakes scripted per
call (`remotes.py`).

Messages are never published: they would be sent after commit (`transaction.on_commit`), and
the test's transaction never commits. The harness finds the work a message would have carried
in the state store instead - a Processing step whose lease it has not delivered yet.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app
from django.conf import settings
from django.db.models import Count, Min, Q
from django.test import override_settings

from agents.breaker import CircuitBreaker
from scheduler.models import Run, Step
from scheduler.models.runs import RUN_TERMINAL_STATES
from scheduler.services import jobs_dispatch, run_submit, scheduler_pump
from supervisor.services import SweepResult, step_expire_sweep

from .clock import VirtualClock, virtual_clock
from .remotes import AgentLost, Behaviour, FakeRemotes, FakeService, HarnessError, UnscriptedCall

INSTANCE = "harness"
# A moment past a deadline: the sweep judges `complete_by < now`.
_PAST = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Delivery:
    """One agent request the harness delivered: the step, its lease and how it ended."""

    step_id: int
    name: str
    operation: str
    lease: str
    at: datetime
    outcome: str  # the agent's return ("success", "permanent", "deadline", ...) or "lost"


class Harness:
    """Use through `harness_open()` (or the pytest fixture `harness`, sastools/testkit/fixtures.py)."""

    def __init__(self, clock: VirtualClock, remotes: FakeRemotes) -> None:
        self.clock = clock
        self.remotes = remotes
        self.deliveries: list[Delivery] = []
        self._delivered: set[str] = set()

    # -- the developer's side -------------------------------------------------------------
    def remote(self, service: str, *, default: Behaviour | None = None) -> FakeService:
        """The fake of remote service `service` (declared on first use), to script per call."""
        CircuitBreaker(service).reset()  # a fresh breaker: no state from an earlier test
        return self.remotes.service(service, default=default)

    def submit(self, workflow: str, input: Mapping[str, Any], **options: Any) -> Run:
        """Submit a run (`scheduler.services.run_submit`, the same validation and rows)."""
        return run_submit(workflow=workflow, input=input, **options)

    def advance(self, seconds: float) -> datetime:
        """Move the clock `seconds` forward (nothing else happens until `settle` or a call)."""
        return self.clock.advance(seconds)

    # -- the engine's actors, on demand ---------------------------------------------------
    def deliver(self) -> int:
        """Run, in-process, the agent of every claimed step not delivered yet (oldest first)."""
        steps = list(
            Step.objects.filter(process_state=Step.State.PROCESSING, lease__isnull=False)
            .exclude(lease__in=self._delivered)
            .order_by("id")
        )
        for step in steps:
            self._deliver_one(step)
        return len(steps)

    def _deliver_one(self, step: Step) -> None:
        lease = str(step.lease)
        self._delivered.add(lease)
        task = current_app.tasks.get(step.operation)
        if task is None:
            # The apps' task modules, as a worker imports them at start (Celery's autodiscovery).
            current_app.loader.import_default_modules()
            task = current_app.tasks.get(step.operation)
        if task is None:
            raise HarnessError(f"step {step.name}: no agent task named {step.operation!r} is registered")
        at = self.clock.now()
        try:
            outcome = str(task(**_request(step)))
        except AgentLost:
            outcome = "lost"
        except UnscriptedCall as exc:
            raise HarnessError(str(exc)) from None
        self.deliveries.append(Delivery(step.pk, step.name, step.operation, lease, at, outcome))

    def pump(self) -> int:
        """One scheduler pump (`scheduler_pump`): claim what is due now. Returns the count."""
        return scheduler_pump(instance=INSTANCE, limit=int(settings.SAS["CLAIM_BATCH"]))

    def sweep(self) -> SweepResult:
        """One supervisor sweep (`step_expire_sweep`) at the clock's now."""
        return step_expire_sweep(batch=100, instance=INSTANCE)

    def dispatch_jobs(self) -> int:
        """One jobs dispatcher tick (`jobs_dispatch`): fire due occurrences. Returns the runs it started."""
        return jobs_dispatch(instance=INSTANCE).started

    # -- the loop -------------------------------------------------------------------------
    def settle(self, *, max_rounds: int = 500, until: datetime | None = None) -> None:
        """Deliver, pump and sweep until no step is Pending or Processing, moving the clock to
        each next deadline or backoff when nothing is due now (never past `until`, if given).
        Raises HarnessError after `max_rounds` rounds (work that never settles)."""
        for _ in range(max_rounds):
            if self.deliver() or self.pump():
                continue
            overdue, upcoming = self._moments()
            if overdue and self._swept():
                continue
            if until is not None and (upcoming is None or upcoming > until):
                self.clock.advance_to(until)
                return
            if upcoming is None:
                self._check_idle()
                return
            self.clock.advance_to(upcoming + _PAST)
        raise HarnessError(f"work not settled after {max_rounds} rounds: {self._open_steps()}")

    def _check_idle(self) -> None:
        """Nothing is due now or later: every step must be settled - a step still Pending or
        Processing here is work the harness cannot move (say which, rather than return)."""
        left = self._open_steps()
        if left:
            raise HarnessError(f"open steps with nothing due and nothing to wait for: {left}")

    def _swept(self) -> int:
        result = self.sweep()
        return result.requeued + result.retried + result.errored

    def _moments(self) -> tuple[bool, datetime | None]:
        """In one query: is a Processing step past a deadline (start_by or complete_by), and
        the earliest moment still to come of a Pending step's not_before or a Processing step's
        start_by or complete_by."""
        now = self.clock.now()
        pending, processing = Q(process_state=Step.State.PENDING), Q(process_state=Step.State.PROCESSING)
        found = Step.objects.filter(pending | processing).aggregate(
            overdue=Count("id", filter=processing & (Q(start_by__lt=now) | Q(complete_by__lt=now))),
            backoff=Min("not_before", filter=pending & Q(not_before__gt=now)),
            start=Min("start_by", filter=processing & Q(start_by__gt=now)),
            complete=Min("complete_by", filter=processing & Q(complete_by__gt=now)),
        )
        moments = [found[k] for k in ("backoff", "start", "complete") if found[k] is not None]
        return bool(found["overdue"]), min(moments) if moments else None

    def _open_steps(self) -> list[tuple[str, str, int]]:
        open_states = (Step.State.PENDING, Step.State.PROCESSING)
        return list(
            Step.objects.filter(process_state__in=open_states).values_list("name", "process_state", "id")
        )

    # -- reading the outcome ---------------------------------------------------------------
    def run(self, run: Run | str) -> Run:
        """The run, fresh from the database."""
        return Run.objects.get(pk=run.pk if isinstance(run, Run) else run)

    def steps(self, run: Run | str) -> list[Step]:
        """The run's steps, in order (forward steps, then compensations)."""
        return list(Step.objects.filter(run_id=run.pk if isinstance(run, Run) else run).order_by("seq", "id"))

    def finished(self, run: Run | str) -> bool:
        return self.run(run).state in RUN_TERMINAL_STATES


def _request(step: Step) -> dict[str, Any]:
    """The agent request a worker would have received for this claim (`Claim.message`). The
    agent trusts only the state store: it loads the step by (id, lease) before acting."""
    assert step.complete_by is not None and step.lease is not None
    message: dict[str, Any] = {
        "step_id": step.pk,
        "lease": str(step.lease),
        "complete_by": step.complete_by.isoformat(),
        "start_by": (step.start_by or step.complete_by).isoformat(),
        "timeout": step.timeout.total_seconds(),
        "idempotency_key": step.idempotency_key,
        "payload": step.payload or {},
        "attempt": max(1, step.attempts),
    }
    if step.heartbeat_window:
        message["heartbeat"] = step.heartbeat_window.total_seconds()
    return message


@contextmanager
def harness_open() -> Iterator[Harness]:
    """A harness for the block: a virtual clock, fake remotes, replies in-process. Needs the
    test's transaction (pytest-django's `db`); prints nothing, changes nothing outside it."""
    with ExitStack() as stack:
        clock = stack.enter_context(virtual_clock())
        remotes = FakeRemotes(clock)
        # Replies in the agent's process (the default): a reply by the scheduler queue would
        # be a broker publish. The circuit breakers never open: they keep time by Redis's
        # clock (agents/breaker.py), which the virtual clock cannot move - an open breaker would
        # hold a service shut for real seconds while the harness jumps hours. Their own tests
        # run live (tests/agents/test_breaker.py).
        engine = {"REPLY_MODE": "inline", "BREAKER_FAILURE_THRESHOLD": 1_000_000_000}
        stack.enter_context(override_settings(SAS={**settings.SAS, **engine}))
        stack.enter_context(remotes.installed())
        yield Harness(clock, remotes)


@contextmanager
def timed(label: str) -> Iterator[None]:
    """Print how long the block took (the harness's tests print their time, issue 31)."""
    started = time.perf_counter()
    try:
        yield
    finally:
        print(f"{label}: {time.perf_counter() - started:.3f}s")

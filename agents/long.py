"""Agents for work that outlives one short attempt (seed 004's long-running jobs).

Two bases, each a Celery task like every agent (same request, same deadline rules, same fenced
reply), for the two strategies of the seed:

- `PagedAgentTask` - "paginate the job processing" (the Checkpoint table). One request is one
  page: in ONE database transaction the agent takes the step's row while its lease is current
  (`page_begin`), reads where the checkpoint is, lets the domain process one page
  (`process_page`, which writes the page's effect on the same connection) and moves the
  checkpoint past it (`page_commit`, compare-and-set). Then it replies `continue` (the engine
  sends the next page at once, no failure counted) or `success` after the last page. Killed
  anywhere, the transaction either committed (effect + checkpoint) or did not (neither): the
  next attempt resumes at the last committed checkpoint and no page is applied twice.

- `HeartbeatAgentTask` - "enqueue message for long future" with a HeartbeatStatus table (the
  seed's JobStatus), for work
  that cannot be paged. The domain's `work` calls `beat()` as it goes; each heartbeat moves the
  step's complete-by to now + the step's window. A heartbeat refused (the worker was frozen or
  slow, the supervisor took the step back) raises `LeaseLost`: the work stops, nothing is
  written. At the end `commit` writes the effect in one transaction with the HeartbeatStatus row's
  completion and the success reply, holding the step while its lease is current.

Both reply inline (in the agent's process): they write to the database anyway.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from celery.exceptions import SoftTimeLimitExceeded
from django.db import transaction

from scheduler import clock
from scheduler.services import (
    LeaseLost,
    heartbeat_finish,
    page_begin,
    page_commit,
    scheduler_instance_id,
    step_heartbeat,
    step_reply,
)

from .base import AgentTask
from .faults import PermanentFault
from .request import AgentRequest

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# Paginated
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page to process: the step's payload, where the page starts (the domain's cursor,
    0 at first), how many rows, how many pages and rows are done, the total if known."""

    step_id: int
    payload: dict[str, Any]
    start: int
    size: int
    index: int
    rows_done: int
    total: int | None


@dataclass(frozen=True)
class PageDone:
    """What a page did: the cursor the next page starts after, the rows it processed, whether
    it was the last page, and the input's total rows (when the domain knows it)."""

    next_start: int
    rows: int
    last: bool
    total: int | None = None


class PagedAgentTask(AgentTask):
    """Base of a paginated step's agent: implement `process_page` (write one page's effect on
    Django's connection - it runs inside the page's transaction - and say what it did)."""

    def process_page(self, page: Page) -> PageDone:
        raise NotImplementedError

    def perform_page(self, **kwargs: Any) -> str:
        """One page: an attempt observed as every agent's (`AgentTask.observed`: metrics, and
        the task shown failed in Flower unless the page was done)."""
        return self.observed(self._perform_page, kwargs)

    def _perform_page(self, request: AgentRequest) -> str:
        window = request.window(timeout=request.timeout)
        if window is None:
            return "dropped"
        window.mark.set()
        step_id, lease, deadline = request.step_id, request.lease, window.deadline
        try:
            with transaction.atomic():
                checkpoint = page_begin(step_id=step_id, lease=lease)
                if checkpoint.completed:
                    # The last page committed and its success reply was lost: just say so.
                    last, pages, rows = True, checkpoint.pages_done, checkpoint.rows_done
                else:
                    done = self.process_page(
                        Page(
                            step_id=step_id,
                            payload=request.payload,
                            start=checkpoint.page_start,
                            size=checkpoint.page_size,
                            index=checkpoint.pages_done,
                            rows_done=checkpoint.rows_done,
                            total=checkpoint.total,
                        )
                    )
                    page_commit(
                        step_id=step_id,
                        lease=lease,
                        checkpoint=checkpoint,
                        next_start=done.next_start,
                        rows=done.rows,
                        total=done.total,
                        last=done.last,
                    )
                    last, pages, rows = done.last, checkpoint.pages_done + 1, checkpoint.rows_done + done.rows
        except LeaseLost as exc:
            logger.info("step %s: %s; page not applied", step_id, exc)
            return "lease_lost"
        except SoftTimeLimitExceeded:
            logger.warning("step %s: page ran into its time limit; rolled back", step_id)
            return "deadline"
        except PermanentFault as exc:
            return self._reply(step_id, lease, deadline, "permanent", error=str(exc))
        except Exception as exc:
            # The page's transaction rolled back: nothing of it was applied. Retried from the
            # same checkpoint after backoff (a failure counted) - or, past the deadline (the
            # database ends a page's statement or idle wait at the step's complete_by, see
            # `page_begin`), no reply: the supervisor takes the step back.
            if clock.now() >= deadline:
                logger.warning("step %s: page ran past its deadline (%s); rolled back", step_id, exc)
                return "deadline"
            logger.exception("step %s: page failed; rolled back", step_id)
            return self._reply(
                step_id, lease, deadline, "transient", error=f"{exc.__class__.__name__}: {exc}", reached=True
            )
        if last:
            return self._reply(step_id, lease, deadline, "success", result={"pages": pages, "rows": rows})
        return self._reply(step_id, lease, deadline, "continue")


# ---------------------------------------------------------------------------------------------
# Heartbeat
# ---------------------------------------------------------------------------------------------


class Beat:
    """Handed to a heartbeat agent's `work`: call it often; it heartbeats at most every
    `interval` seconds (a third of the step's window) and raises LeaseLost once the step is no
    longer this worker's."""

    def __init__(self, *, step_id: int, lease: str, interval: float) -> None:
        self.step_id, self.lease, self.interval = step_id, lease, interval
        self.worker = scheduler_instance_id()
        self.count = 0
        self.complete_by: datetime | None = None
        self._last = float("-inf")

    def __call__(self, *, force: bool = False) -> None:
        if not force and time.monotonic() - self._last < self.interval:
            return
        result = step_heartbeat(step_id=self.step_id, lease=self.lease, worker=self.worker)
        if not result.extended:
            raise LeaseLost(f"step {self.step_id}: heartbeat refused, lease {self.lease} is gone")
        self._last = time.monotonic()
        self.count += 1
        self.complete_by = result.complete_by


class HeartbeatAgentTask(AgentTask):
    """Base of a heartbeat step's agent: implement `work` (the long part: call `beat()` often,
    write nothing that matters) and `commit` (write its effect; runs in the fenced transaction
    that also accepts the success; returns the step's result).

    Its message is acknowledged when a worker starts it, not when it ends (`acks_late` off,
    unlike every other agent): a heartbeat step may run for its whole deadline (the export's
    15 min), and a delivery held unacknowledged that long meets the broker's bound on holds -
    RabbitMQ's `consumer_timeout` closes the worker's channel, and Celery's worker exits
    ("Unrecoverable error: PreconditionFailed"); Redis's `visibility_timeout` delivers it a
    second time. Late acks buy nothing here anyway: if the worker dies, its heartbeats stop and
    the supervisor takes the step back within one window + one sweep, from the database.
    (tests/e2e/test_consumer_timeout_live.py shows both on a RabbitMQ with a 3 s timeout.)"""

    acks_late = False

    def work(self, *, payload: dict[str, Any], beat: Beat) -> Any:
        raise NotImplementedError

    def commit(self, *, payload: dict[str, Any], built: Any, lease: str) -> Any:
        raise NotImplementedError

    def discard(self, *, payload: dict[str, Any], built: Any) -> None:
        """Clean up what `work` built when it cannot be committed (override if it made files)."""

    def perform_long(self, **kwargs: Any) -> str:
        """The whole long work: an attempt observed as every agent's (`AgentTask.observed`)."""
        return self.observed(self._perform_long, kwargs)

    def _perform_long(self, request: AgentRequest) -> str:
        # Heartbeats move complete-by on: the first window is the only bound known now.
        window = request.window(timeout=None)
        if window is None:
            return "dropped"
        window.mark.set()
        step_id, lease, payload, heartbeat = (
            request.step_id,
            request.lease,
            request.payload,
            request.heartbeat,
        )
        if heartbeat is None:
            raise TypeError(f"step {step_id}: a heartbeat step's request without its window")
        beat = Beat(step_id=step_id, lease=lease, interval=max(0.05, heartbeat / 3))
        built: Any = None
        try:
            beat(force=True)
            built = self.work(payload=payload, beat=beat)
            beat(force=True)
            with transaction.atomic():
                heartbeat_finish(step_id=step_id, lease=lease)
                result = self.commit(payload=payload, built=built, lease=lease)
                if step_reply(step_id=step_id, lease=lease, outcome="success", result=result) != "accepted":
                    raise LeaseLost(f"step {step_id}: success refused")
        except LeaseLost as exc:
            logger.info("step %s: %s; stopped without effect", step_id, exc)
            self.discard(payload=payload, built=built)
            return "lease_lost"
        except SoftTimeLimitExceeded:
            logger.warning("step %s: ran into its time limit; stopped without effect", step_id)
            self.discard(payload=payload, built=built)
            return "deadline"
        except PermanentFault as exc:
            self.discard(payload=payload, built=built)
            return self._reply(
                step_id, lease, self._deadline(beat, window.outer), "permanent", error=str(exc)
            )
        except Exception as exc:
            logger.exception("step %s: failed", step_id)
            self.discard(payload=payload, built=built)
            return self._reply(
                step_id,
                lease,
                self._deadline(beat, window.outer),
                "transient",
                error=f"{exc.__class__.__name__}: {exc}",
                reached=True,
            )
        return "success"

    @staticmethod
    def _deadline(beat: Beat, outer: datetime) -> datetime:
        return beat.complete_by or outer

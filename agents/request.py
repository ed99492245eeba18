"""One agent request, as every kind of agent receives it: the short ones (`AgentTask.perform`),
the long steps' pages and heartbeat work (agents/long.py). One type, so the request's fields and
its deadline rules are written once."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from scheduler import clock
from scheduler.attempts import StartMark, attempt_start_mark

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttemptWindow:
    """When an attempt that started in time must end: the claim's outer complete-by, this
    attempt's own deadline (its start + timeout, within the outer one), and the attempt's start
    mark (not set yet: the short agents set it in their first breaker check's round trip)."""

    outer: datetime
    deadline: datetime
    mark: StartMark


@dataclass(frozen=True)
class AgentRequest:
    """The request as the state store holds it (`AgentTask.held_request`): the message's ids
    and fence, the step's payload, idempotency key, deadlines and attempt; `path` is the short
    agents' remote path, `heartbeat` a heartbeat step's window (seconds)."""

    step_id: int
    lease: str
    complete_by: str
    idempotency_key: str
    payload: dict[str, Any]
    attempt: int = 1
    start_by: str | None = None
    timeout: float | None = None
    heartbeat: float | None = None
    path: str = ""

    def window(self, *, timeout: float | None) -> AttemptWindow | None:
        """Start the attempt as every agent does: None (and nothing done) when the request was
        not started in time - the supervisor sends the step again, no failure counted. Time at
        work starts now (the queue's wait is not counted); `timeout` None: no own deadline."""
        outer = datetime.fromisoformat(self.complete_by)
        started = clock.now()
        if started >= outer or (
            self.start_by is not None and started >= datetime.fromisoformat(self.start_by)
        ):
            logger.info("step %s: request expired before it was read; dropped", self.step_id)
            return None
        deadline = min(outer, started + timedelta(seconds=timeout)) if timeout else outer
        mark = attempt_start_mark(lease=self.lease, ttl_seconds=(outer - started).total_seconds() + 60)
        return AttemptWindow(outer=outer, deadline=deadline, mark=mark)

"""What transitions return: the claim an agent receives, the rows a transition changed, the
failure a step met, and the error a transition raises for an observed run."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

# ---------------------------------------------------------------------------------------------
# What transitions return
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A claimed step: what its agent needs (ids, fence, deadline, payload)."""

    step_id: int
    run_id: str
    name: str
    operation: str
    lease: str
    complete_by: datetime
    claimed_at: datetime
    start_by: datetime
    timeout: float
    idempotency_key: str
    payload: dict[str, Any]
    attempt: int
    failure_count: int
    # A heartbeat step's window in seconds (0: the step does not heartbeat), and the step's
    # whole deadline: a heartbeat attempt may run until then, so its Celery time limits do.
    heartbeat: float = 0.0
    close_by: datetime | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Claim:
        return cls(
            step_id=int(data["step_id"]),
            run_id=str(data["run_id"]),
            name=data["name"],
            operation=data["operation"],
            lease=str(data["lease"]),
            complete_by=datetime.fromisoformat(data["complete_by"]),
            claimed_at=datetime.fromisoformat(data["claimed_at"]),
            start_by=datetime.fromisoformat(data["start_by"]),
            timeout=float(data["timeout"]),
            idempotency_key=data["idempotency_key"],
            payload=data["payload"] or {},
            attempt=int(data["attempt"]),
            failure_count=int(data["failure_count"]),
            heartbeat=float(data.get("heartbeat") or 0.0),
            close_by=datetime.fromisoformat(data["close_by"]) if data.get("close_by") else None,
        )

    def message(self) -> dict[str, Any]:
        """The agent request: ids, fence, deadline and payload - JSON only. A heartbeat step's
        request also carries its window (`heartbeat`, seconds)."""
        message: dict[str, Any] = {
            "step_id": self.step_id,
            "lease": self.lease,
            "complete_by": self.complete_by.isoformat(),
            "start_by": self.start_by.isoformat(),
            "timeout": self.timeout,
            "idempotency_key": self.idempotency_key,
            "payload": self.payload,
            "attempt": self.attempt,
        }
        if self.heartbeat:
            message["heartbeat"] = self.heartbeat
        return message


@dataclass
class Transitioned:
    """Claims to dispatch after commit, and events of observed runs (jsonb rows) to announce."""

    claims: list[Claim] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _transitioned(data: dict[str, Any]) -> Transitioned:
    return Transitioned(
        claims=[Claim.from_json(c) for c in data.get("claims") or []], events=list(data.get("events") or [])
    )


@dataclass
class Succeeded(Transitioned):
    accepted: bool = False
    step_id: int = 0
    run_id: str = ""
    operation: str = ""
    needs_payload: int | None = None


@dataclass(frozen=True)
class FailedStep:
    step_id: int
    run_id: str
    name: str
    failure_count: int
    kind: str = ""
    max_failures: int = 0
    error: str = ""
    delay: float = 0.0
    # Why an errored step gave up: "failures" (its budget), "deadline" (its whole-step deadline).
    give_up: str = ""


@dataclass
class Failed:
    """What `step_fail` did: steps back to Pending after a delay, steps errored, and
    compensations that just passed their alert threshold (still retrying)."""

    retried: list[FailedStep] = field(default_factory=list)
    errored: list[FailedStep] = field(default_factory=list)
    alerting: list[FailedStep] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)


def _failed(data: dict[str, Any]) -> Failed:
    def steps(rows: list[dict[str, Any]]) -> list[FailedStep]:
        return [
            FailedStep(
                step_id=int(r["step_id"]),
                run_id=str(r["run_id"]),
                name=r["name"],
                failure_count=int(r["failure_count"]),
                kind=r.get("kind", ""),
                max_failures=int(r.get("max_failures", 0)),
                error=r.get("error", ""),
                delay=float(r.get("delay", 0.0)),
                give_up=r.get("give_up") or "",
            )
            for r in rows
        ]

    return Failed(
        retried=steps(data.get("retried") or []),
        errored=steps(data.get("errored") or []),
        alerting=steps(data.get("alerting") or []),
        events=list(data.get("events") or []),
    )


class RunObserved(Exception):
    """sas_step_succeed refused to run outside a transaction for an observed run."""

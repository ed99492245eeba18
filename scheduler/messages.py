"""What a Celery message to the engine must look like, checked before any of it is used
(issue 22, "Bad input, tried for real").

The broker is a boundary too: a message may be forged, replayed, truncated or sent by an old
release. A task that received one with the wrong shape used to raise from deep inside (a
TypeError on `fromisoformat`, a DataError on `::uuid`), which Celery logs as a crash with a
traceback. Now each engine task checks its envelope first: a message that fails is logged (one
line, naming the task, the step and the problem) and dropped - acknowledged, never requeued, so
a poison message cannot loop - and nothing is read or written for it.

A well-formed message with a forged or replayed lease passes this check. An agent request then
meets the agent's own: it acts only on the request the step holds, loaded by (step id, lease)
before any call (`agents.base.AgentTask.held_request`, issue 26); a reply meets the lease fence
in the reply service (one `late_reply` history row, no state change), as for any late reply.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

REPLY_OUTCOMES = ("success", "permanent", "transient", "deferred", "continue")
_BIGINT = 2**63 - 1
# An agent request carries these; anything else is not ours.
REQUEST_FIELDS = {
    "step_id",
    "lease",
    "complete_by",
    "start_by",
    "timeout",
    "idempotency_key",
    "payload",
    "attempt",
    "heartbeat",
}
REQUEST_REQUIRED = {"step_id", "lease", "complete_by", "idempotency_key", "payload"}
REPLY_FIELDS = {"step_id", "lease", "outcome", "result", "error", "worker", "retry_after", "reached"}
REPLY_REQUIRED = {"step_id", "lease", "outcome"}


def message_max_bytes() -> int:
    """The largest JSON a message's payload or result may take (SAS["MESSAGE_MAX_BYTES"])."""
    return int(settings.SAS["MESSAGE_MAX_BYTES"])


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and value == value and abs(value) < 1e12


def _uuid_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return "lease: not a string"
    try:
        uuid.UUID(value)
    except ValueError:
        return "lease: not a UUID"
    return None


def _datetime_problem(name: str, value: Any) -> str | None:
    if not isinstance(value, str) or len(value) > 64:
        return f"{name}: not an ISO 8601 date-time"
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return f"{name}: not an ISO 8601 date-time"
    return None if parsed.tzinfo is not None else f"{name}: no time zone"


def _size_problem(name: str, value: Any) -> str | None:
    try:
        size = len(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return f"{name}: not JSON"
    limit = message_max_bytes()
    return f"{name}: {size} bytes, over the limit of {limit}" if size > limit else None


def _fields_problem(kwargs: dict[str, Any], *, allowed: set[str], required: set[str]) -> str | None:
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        return f"unknown fields {unknown[:5]}"
    missing = sorted(required - set(kwargs))
    return f"missing fields {missing}" if missing else None


def _step_id_problem(value: Any) -> str | None:
    return None if _is_int(value) and 0 < value <= _BIGINT else "step_id: not a positive integer"


@dataclass(frozen=True)
class _MessageShape:
    """One kind of engine message: its name, its fields, and the checks of its own fields."""

    kind: str
    allowed: set[str]
    required: set[str]
    fields: Callable[[dict[str, Any]], list[str | None]]


def _message_problem(args: Any, kwargs: Any, shape: _MessageShape) -> str | None:
    """Why an engine message is malformed, or None: keyword-only, an object, its fields, its
    step id and lease - the checks every message takes - then its kind's own (`fields`)."""
    if args:
        return f"positional arguments (a {shape.kind} is keyword-only)"
    if not isinstance(kwargs, dict):
        return "keyword arguments are not an object"
    checks = [
        _fields_problem(kwargs, allowed=shape.allowed, required=shape.required),
        _step_id_problem(kwargs.get("step_id")),
        _uuid_problem(kwargs.get("lease")),
        *shape.fields(kwargs),
    ]
    return next((problem for problem in checks if problem), None)


def _request_fields_problems(kwargs: dict[str, Any]) -> list[str | None]:
    checks = [_datetime_problem("complete_by", kwargs.get("complete_by"))]
    if kwargs.get("start_by") is not None:
        checks.append(_datetime_problem("start_by", kwargs["start_by"]))
    key = kwargs.get("idempotency_key")
    if not isinstance(key, str) or not 0 < len(key) <= 255:
        checks.append("idempotency_key: not a string of 1 to 255 characters")
    if not isinstance(kwargs.get("payload"), dict):
        checks.append("payload: not an object")
    else:
        checks.append(_size_problem("payload", kwargs["payload"]))
    if "attempt" in kwargs and not (_is_int(kwargs["attempt"]) and 0 < kwargs["attempt"] < 1_000_000):
        checks.append("attempt: not a positive integer")
    for name in ("timeout", "heartbeat"):
        value = kwargs.get(name)
        if value is not None and not (_is_number(value) and value > 0):
            checks.append(f"{name}: not a positive number")
    return checks


_REQUEST = _MessageShape("request", REQUEST_FIELDS, REQUEST_REQUIRED, _request_fields_problems)


def agent_request_problem(args: Any, kwargs: Any) -> str | None:
    """Why an agent request (scheduler.transitions.Claim.message) is malformed, or None."""
    return _message_problem(args, kwargs, _REQUEST)


def _reply_fields_problems(kwargs: dict[str, Any]) -> list[str | None]:
    checks = [
        None if kwargs.get("outcome") in REPLY_OUTCOMES else f"outcome: not one of {REPLY_OUTCOMES}",
        _size_problem("result", kwargs.get("result")),
    ]
    for name in ("error", "worker"):
        value = kwargs.get(name, "")
        if not isinstance(value, str) or len(value) > 10_000:
            checks.append(f"{name}: not a string of at most 10000 characters")
    retry_after = kwargs.get("retry_after", 0.0)
    if not (_is_number(retry_after) and retry_after >= 0):
        checks.append("retry_after: not a number >= 0")
    if not isinstance(kwargs.get("reached", False), bool):
        checks.append("reached: not a boolean")
    return checks


_REPLY = _MessageShape("reply", REPLY_FIELDS, REPLY_REQUIRED, _reply_fields_problems)


def reply_problem(args: Any, kwargs: Any) -> str | None:
    """Why an agent's reply (scheduler.reply) is malformed, or None."""
    return _message_problem(args, kwargs, _REPLY)


def message_step_label(kwargs: Any) -> str:
    """The step id as a log may print it (bounded: a forged one can be anything)."""
    value = kwargs.get("step_id") if isinstance(kwargs, dict) else None
    return repr(value)[:40]

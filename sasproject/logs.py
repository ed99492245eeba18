"""Logging for every process (issue 19): one configuration, a human or a JSON format, quiet
when idle, and the engine's state changes as lines that carry their run.

- `LOG_FORMAT=text` (default; `make run`): `time LEVEL logger message`, as before.
- `LOG_FORMAT=json`: one JSON object per line - `ts`, `level`, `logger`, `message`, `process`,
  `worker`, and, on the engine's lines, `event`, `run`, `step`, `lease`, `attempt`,
  `operation`. A run is followed across processes by its `run` id (`jq 'select(.run == "...")'`).
- The engine's state changes go to the `sas.events` logger (`state_change`): at INFO with
  `LOG_FORMAT=json`, silent in the text format unless `LOG_EVENTS=1` (a line per step would
  bury `make run`'s terminal).
- Quiet when idle: Celery's "received" / "succeeded" lines and beat's "Sending due task" for the
  engine's periodic tasks (the 1-second sweep, tick and dispatcher; ~455 lines a minute on an
  idle `make run`) are dropped at INFO (`QuietPeriodicFilter`); their errors still show. What a
  sweep or tick did is logged by the sweep itself, only when it did something.

Celery configures logging itself unless a receiver of its `setup_logging` signal does it:
sasproject/celery.py connects `configure_celery_logging`, so workers and beat use these
settings too. https://docs.celeryq.dev/en/stable/userguide/signals.html#setup-logging
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import logging.config
import os
import socket
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

# The fields an engine line may carry, in the order a JSON line shows them.
FIELDS = ("event", "run", "step", "lease", "attempt", "operation", "outcome")

# Periodic engine tasks whose every run would otherwise log two lines (received, succeeded) and a
# third in beat (sending due task): the shipped beat rows (supervisor/periodic.py's periodic_tasks_shipped)
# (tests/sasproject/test_logs.py keeps the two lists equal; settings cannot import an app).
QUIET_TASKS = frozenset(
    {
        "supervisor.sweep",
        "scheduler.tick",
        "scheduler.jobs_dispatch",
        "alerting.evaluate",
        "ops.storage_maintain",
    }
)

_context: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "sas_log_context", default=None
)
_worker = f"{os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else 'python'}@{socket.gethostname()}"

events_logger = logging.getLogger("sas.events")


def set_worker_name(name: str) -> None:
    """This process's name in JSON lines (`worker`): the Celery node name (control@host) in a
    worker, beat@host in beat; the host otherwise."""
    global _worker
    _worker = name


def worker_name() -> str:
    return _worker


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Every line logged inside carries these fields (an agent's step, lease and attempt, so its
    retries and its reply are followed with the step)."""
    token = _context.set({**(_context.get() or {}), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


def state_change(event: str, message: str, *args: Any, level: int = logging.INFO, **fields: Any) -> None:
    """One line for one state change of the engine (`event`: step_claimed, step_succeeded...),
    with its run, step, lease, attempt... as structured fields. Costs nothing when the
    `sas.events` logger is off (the text format's default)."""
    if events_logger.isEnabledFor(level):
        extra = {k: (str(v) if k in ("run", "lease") else v) for k, v in fields.items() if v is not None}
        events_logger.log(level, message, *args, extra={"event": event, **extra})


class ContextFilter(logging.Filter):
    """Adds `worker` and the log_context fields to every record (a field given by `extra=` wins)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = _worker
        for key, value in (_context.get() or {}).items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


class QuietPeriodicFilter(logging.Filter):
    """Drops the INFO lines Celery and beat write for every run of the engine's periodic tasks."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        if record.name in ("celery.worker.strategy", "celery.app.trace"):
            args = record.args
            return not (isinstance(args, dict) and args.get("name") in QUIET_TASKS)
        if record.name == "celery.beat" and isinstance(record.args, tuple) and len(record.args) >= 2:
            return record.args[1] not in QUIET_TASKS
        return True


class ExpectedForbiddenFilter(logging.Filter):
    """On `django.request`: a refusal (PermissionDenied, answered 403) is one WARNING line with
    what was missing, not a traceback (issue 28) - Django logs it with `exc_info`, and a staff
    account in the wrong role filled the log with stack traces that look like crashes. The
    reason is the one the 403 page showed (ops/forbidden.py leaves it on the request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from django.core.exceptions import PermissionDenied

        exc = record.exc_info[1] if record.exc_info else None
        if getattr(record, "status_code", None) != 403 or not isinstance(exc, PermissionDenied):
            return True
        record.exc_info = None
        record.exc_text = None
        reason = getattr(getattr(record, "request", None), "sas_forbidden_reason", "") or str(exc)
        if reason and isinstance(record.args, tuple):
            record.msg = f"{record.msg} - %s"
            record.args = (*record.args, reason)
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line (no newline inside: a traceback is the `exc` field)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "worker": getattr(record, "worker", _worker),
        }
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc"] = record.exc_text
        return json.dumps(line, default=str)


def logging_config(*, log_format: str, level: str, events: bool) -> dict[str, Any]:
    """settings.LOGGING. `log_format`: text | json; `events`: the sas.events lines at INFO."""
    if log_format not in ("text", "json"):
        raise ValueError(f"LOG_FORMAT must be text or json, not {log_format!r}")
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "context": {"()": "sasproject.logs.ContextFilter"},
            "quiet_periodic": {"()": "sasproject.logs.QuietPeriodicFilter"},
            "expected_forbidden": {"()": "sasproject.logs.ExpectedForbiddenFilter"},
        },
        "formatters": {
            "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
            "json": {"()": "sasproject.logs.JsonFormatter"},
        },
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": log_format,
                "filters": ["context", "quiet_periodic"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        "loggers": {
            # Operator alerts are logged at ERROR on this logger besides being stored as rows.
            "sas.alerts": {"level": "WARNING"},
            "sas.events": {"level": "INFO" if events else "WARNING"},
            # One INFO line per HTTP request is noise at agent volume.
            "httpx": {"level": "WARNING"},
            "httpcore": {"level": "WARNING"},
            # A 403 is one WARNING line naming what was missing, no traceback (issue 28).
            "django.request": {"filters": ["expected_forbidden"]},
        },
    }


def configure_early() -> None:
    """With LOG_FORMAT=json, JSON from a Celery process's first line: Celery warns (running as
    root, deprecated settings) before it sets up logging, and those warnings would be plain
    text on stderr. Until settings.LOGGING replaces it, a JSON handler on the root logger."""
    if os.environ.get("LOG_FORMAT", "").strip().lower() != "json":
        return
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    logging.basicConfig(handlers=[handler], level=logging.INFO)
    logging.captureWarnings(True)


def json_enabled() -> bool:
    from django.conf import settings

    return getattr(settings, "LOG_FORMAT", "text") == "json"


def configure_celery_logging(**kwargs: Any) -> None:
    """Celery's setup_logging receiver: Django's LOGGING for workers and beat (instead of
    Celery's own handlers and formats). With the JSON format, Python's warnings go through
    logging too (they would be plain lines on stderr)."""
    from django.conf import settings

    logging.config.dictConfig(settings.LOGGING)
    if json_enabled():
        logging.captureWarnings(True)

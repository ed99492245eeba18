"""sasproject/logs.py without processes: the JSON line's fields, the quiet filter's reach."""

from __future__ import annotations

import json
import logging

from sasproject.logs import QUIET_TASKS, ContextFilter, JsonFormatter, QuietPeriodicFilter, log_context
from supervisor.periodic import periodic_tasks_shipped


def _record(name: str, level: int, msg: str, args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord(name, level, __file__, 1, msg, args, None)  # type: ignore[arg-type]
    record.__dict__.update(extra)
    return record


def test_quiet_tasks__exactly_the_engines_periodic_tasks() -> None:
    assert {task for _, task, _, _ in periodic_tasks_shipped()} == QUIET_TASKS


def test_quiet_filter__drops_periodic_info_lines_keeps_their_errors_and_every_other_task() -> None:
    quiet = QuietPeriodicFilter()
    received = "Task %(name)s[%(id)s] received"

    assert not quiet.filter(
        _record("celery.worker.strategy", logging.INFO, received, {"name": "supervisor.sweep", "id": "1"})
    )
    assert not quiet.filter(
        _record(
            "celery.beat",
            logging.INFO,
            "Scheduler: Sending due task %s (%s)",
            ("sas: jobs dispatcher", "scheduler.jobs_dispatch"),
        )
    )
    assert quiet.filter(
        _record("celery.app.trace", logging.ERROR, received, {"name": "supervisor.sweep", "id": "1"})
    )
    assert quiet.filter(
        _record(
            "celery.worker.strategy", logging.INFO, received, {"name": "agents.payment.charge", "id": "2"}
        )
    )


def test_json_formatter__one_line_with_the_context_and_the_extra_fields() -> None:
    record = _record("sas.events", logging.INFO, "step %s succeeded", (7,), event="step_succeeded", run="r-1")
    with log_context(step=7, lease="l-1", attempt=2):
        ContextFilter().filter(record)

    line = JsonFormatter().format(record)

    assert "\n" not in line
    data = json.loads(line)
    assert data["message"] == "step 7 succeeded"
    assert {k: data[k] for k in ("event", "run", "step", "lease", "attempt")} == {
        "event": "step_succeeded",
        "run": "r-1",
        "step": 7,
        "lease": "l-1",
        "attempt": 2,
    }
    assert data["worker"] and data["level"] == "INFO" and data["logger"] == "sas.events"

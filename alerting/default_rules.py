"""The operator alert rules that ship, created by a data migration (supervisor 0006, from when the
alert models were the supervisor's) and then edited in the admin (an edited or deleted rule is
never overwritten)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

# (name, kind, fields). Thresholds: see AlertRule.threshold's help text.
DEFAULT_RULES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("A step in Error", "step_error", {"severity": "warning", "window": timedelta(hours=1)}),
    ("Runs needing an operator", "run_needs_operator", {"severity": "critical", "window": timedelta(days=7)}),
    (
        "A compensation keeps failing",
        "compensation_struggling",
        {"severity": "critical", "window": timedelta(days=7)},
    ),
    (
        "Workflow failure rate",
        "workflow_failure_rate",
        {
            "threshold": 0.5,
            "min_runs": 10,
            "window": timedelta(minutes=15),
            "for_duration": timedelta(minutes=1),
        },
    ),
    (
        "Job failure rate",
        "job_failure_rate",
        {"threshold": 0.5, "min_runs": 5, "window": timedelta(hours=1)},
    ),
    ("Job failing repeatedly", "job_consecutive_failures", {"threshold": 3}),
    (
        "Remote service failure rate",
        "service_failure_rate",
        {"threshold": 0.5, "min_runs": 20, "window": timedelta(minutes=5)},
    ),
    ("Circuit open for 2 minutes", "circuit_open", {"threshold": 120, "severity": "critical"}),
    ("Steps overdue", "steps_overdue", {"threshold": 0, "for_duration": timedelta(seconds=30)}),
    (
        "Queue with work and no consumer",
        "queue_no_consumer",
        {"severity": "critical", "for_duration": timedelta(seconds=30)},
    ),
    ("Dispatch lag over 60 s", "dispatch_lag", {"threshold": 60}),
    ("Due backlog over 10000", "due_backlog", {"threshold": 10000}),
    (
        "Supervisor not running",
        "periodic_not_run",
        {"target": "sas: supervisor sweep", "threshold": 10, "severity": "critical"},
    ),
    (
        "Jobs dispatcher not running",
        "periodic_not_run",
        {"target": "sas: jobs dispatcher", "threshold": 10, "severity": "critical"},
    ),
)


def default_rules_ensure(*, rule_model: Any) -> list[str]:
    """Create the shipped operator rules that do not exist (by name); leave edited ones alone."""
    created: list[str] = []
    for name, kind, fields in DEFAULT_RULES:
        _, made = rule_model.objects.get_or_create(name=name, owner=None, defaults={"kind": kind, **fields})
        if made:
            created.append(name)
    return created

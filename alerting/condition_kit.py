"""What every rule kind's condition is made of (issue 21; split by kind in issue 27): a
`Statement` (a database kind's SQL, its parameters built from the kind's rules, its rows turned
into findings), the types a condition passes around, and the small helpers each kind shares.
The kinds themselves are `failure_conditions` (runs, jobs, steps and services failing) and
`platform_conditions` (the platform's liveness: deadlines, the dispatcher, breakers, queues,
the periodic tasks); `conditions` evaluates them all in one round trip."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection

from alerting.models import AlertRule
from alerting.transitions import Finding
from scheduler.models import RUN_TERMINAL_STATES, RunState

# At most this many runs are linked to an alert per evaluation (the newest); the next ticks
# link the rest while the condition holds.
RUNS_PER_FINDING = 100
# Run outcomes that count as failures: undone (compensated) or needing an operator (failed).
FAILED_STATES = [RunState.COMPENSATED.value, RunState.FAILED.value]
TERMINAL = [s.value for s in RUN_TERMINAL_STATES]
LIMIT_PARAMS = {"limit": RUNS_PER_FINDING}

Rules = Sequence[AlertRule]
Found = dict[int, list[Finding]]
Rows = list[tuple[Any, ...]]


@dataclass(frozen=True)
class Statement:
    """A database kind: its statement, its parameters built from the kind's rules, and its
    rows turned into findings."""

    sql: str
    params: Callable[[Rules], dict[str, Any]]
    findings: Callable[[Rules, Rows], Found]

    def run(self, rules: Rules) -> Found:
        """This kind alone, in one round trip."""
        with connection.cursor() as cursor:
            cursor.execute(self.sql, self.params(rules))
            return self.findings(rules, list(cursor.fetchall()))


def ids_of(values: Any) -> list[str]:
    """A row's array of run ids (or NULL) as the strings a finding links."""
    return [str(v) for v in (values or [])]


def found_none(rules: Rules) -> Found:
    """Every rule of the kind, with no finding yet (a rule with none resolves its alerts)."""
    return {rule.pk: [] for rule in rules}


def widest_window(rules: Rules) -> timedelta:
    return max((rule.window for rule in rules), default=timedelta(0))


def rules_targeting(rules: Rules, name: str) -> Iterable[AlertRule]:
    """The rules of a rule-independent read that watch `name`: theirs, or every one ("")."""
    return (rule for rule in rules if rule.target in ("", name))


def over_threshold(
    rules: Rules, count: float | None, message: Callable[[AlertRule], str], run_ids: Sequence[str] = ()
) -> Found:
    """A one-row, rule-independent figure (a count, a lag): a finding for each rule whose
    threshold it passes, worded by `message`."""
    found = found_none(rules)
    for rule in rules:
        if count is not None and float(count) > rule.threshold:
            found[rule.pk].append(Finding(subject="", message=message(rule), run_ids=run_ids))
    return found

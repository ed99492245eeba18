"""A job, its runs and its history as plain data: what the API returns and the pages show.

Reads only what the scheduler's job selectors returned (`job_list` annotates `next_run_at`,
`last_run_state` and `last_run_at`); nothing here queries or writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from alerting.models import AlertRule, RuleKind
from scheduler.dispatcher.selectors import job_schedule_text
from scheduler.models import Job, Run, Step, TaskExecutionHistory
from scheduler.outcomes import run_shown, run_undone_of
from scheduler.workflows import step_label_of

from .reasons import attempt_reason, run_reason

ACTIVE, PAUSED, FINISHED = "active", "paused", "finished"
# Why an occurrence's run started, in words (the engine's codes; a skipped or buffered
# occurrence's reason is already a sentence and is shown as it is).
START_REASONS = {
    "schedule": "On schedule",
    "run_now": "Run now",
    "catch_up": "Caught up after downtime",
    "backfill": "Backfill",
    "backfill_deps": "Backfill (with its dependents)",
    "dependency": "Its parent jobs ended",
    "retry": "Retry",
    "buffered": "Was buffered behind the previous run",
    "cancel_other": "Replaced the cancelled run",
}
STATE_LABELS = {ACTIVE: "Active", PAUSED: "Paused", FINISHED: "Finished"}


def job_state(job: Job) -> str:
    """active, paused (a person stopped it) or finished (nothing more will run, and its last run
    has ended). The one rule the list, the job page and the API ask: a one-off job whose only
    run is still going is active until that run ends (and a retry it earned has run) - the
    scheduler finishes its schedule when it fires (`finished_at`), `work_left` (annotated by
    `job_annotate`) says a run or a retry is still to end."""
    if not job.enabled:
        return PAUSED
    if job.finished_at is not None and not getattr(job, "work_left", False):
        return FINISHED
    return ACTIVE


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def job_data(job: Job) -> dict[str, Any]:
    """Every field of the job, as the API's `JobSerializer` and the pages read it."""
    last_state = getattr(job, "last_run_state", None)
    last_at = getattr(job, "last_run_at", None)
    state = job_state(job)
    last_run = None
    if last_state is not None:
        shown, label = run_shown(state=last_state, undone=run_undone_of(job, "last_run_undone"))
        last_run = {"state": last_state, "shown_state": shown, "label": label, "at": last_at}
    return {
        "id": job.pk,
        "name": job.name,
        "state": state,
        "state_label": STATE_LABELS[state],
        "workflow": job.workflow,
        "input": job.input,
        "recurring": job.is_recurring,
        "cron": job.cron,
        "timezone": job.timezone,
        "schedule_text": job_schedule_text(job),
        "run_at": job.run_at,
        "start_at": job.start_at,
        "end_at": job.end_at,
        "max_firings": job.max_firings,
        # Counted toward max firings only: none for a job without a limit.
        "firing_count": job.firing_count if job.max_firings is not None else None,
        "overlap_policy": job.overlap_policy,
        "overlap_policy_label": job.get_overlap_policy_display(),
        "catchup_window": _seconds(job.catchup_window),
        "jitter": job.jitter,
        "max_retry": job.max_retry,
        "retry_backoff": _seconds(job.retry_backoff),
        "priority": job.priority,
        "idempotent": job.idempotent,
        "paused_note": job.paused_note,
        "paused_at": job.paused_at,
        "finished_at": job.finished_at,
        "next_run_at": getattr(job, "next_run_at", None),
        "last_run": last_run,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


def run_data(run: Run, *, outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A run of a job: `state` the engine's (the API's), `shown_state` / `state_label` what the
    pages show (scheduler/outcomes.py: Failed when nothing was undone), `reason` its error in a
    sentence (jobs/reasons.py; `error` raw, for the API and on demand); `outputs`: what its
    steps returned (scheduler.outputs.runs_outputs, read by the caller for the page's runs)."""
    shown, label = run_shown(state=run.state, undone=run_undone_of(run))
    return {
        "id": run.pk,
        "state": run.state,
        "shown_state": shown,
        "state_label": label,
        "reason": run_reason(run.error, workflow=run.workflow),
        "terminal": run.is_terminal,
        "scheduled_for": run.scheduled_for,
        "attempt": run.job_attempt,
        "error": run.error,
        "created_at": run.created_at,
        "finished_at": run.finished_at,
        "outputs": outputs or [],
    }


def reason_text(reason: str) -> str:
    return START_REASONS.get(reason, reason)


OPERATOR_ACTIONS = {"paused": "Paused", "resumed": "Resumed", "edited": "Edited"}


def operator_text(row: TaskExecutionHistory, detail: dict[str, Any]) -> str:
    """An operator row in words: "Paused by user ann (web): stock count this week", "Edited by
    user ann (api): cron, timezone"."""
    reason = str(detail.get("reason") or "")
    text = f"{OPERATOR_ACTIONS.get(reason, reason or 'Changed')} by {row.worker or 'an unnamed caller'}"
    if detail.get("note"):
        text += f": {detail['note']}"
    if detail.get("changed"):
        text += ": " + ", ".join(str(name) for name in detail["changed"])
    return text


def history_status_shown(row: TaskExecutionHistory) -> str:
    """A job row closed "compensated" whose run undid nothing reads failed (scheduler/outcomes.py)."""
    if row.status == TaskExecutionHistory.Status.COMPENSATED and run_undone_of(row) is False:
        return str(TaskExecutionHistory.Status.FAILED)
    return str(row.status)


def history_data(row: TaskExecutionHistory, *, workflow: str = "") -> dict[str, Any]:
    """A history row. `error` raw (the API, and the page's "details"); `error_text` the same in a
    sentence when it is a run's error (jobs/reasons.py), else as it was written (the
    dispatcher's own sentences: "input no longer valid: ...")."""
    detail = row.detail if isinstance(row.detail, dict) else {}
    reason = str(detail.get("reason") or "")
    operator = row.kind == TaskExecutionHistory.Kind.OPERATOR
    shown = history_status_shown(row)
    return {
        "id": row.pk,
        "status": row.status,
        "shown_status": shown,
        "status_label": TaskExecutionHistory.Status(shown).label,
        "error_text": run_reason(row.error, workflow=workflow) if row.run_id and row.error else row.error,
        "scheduled_for": row.scheduled_for,
        "run_id": row.run_id,
        "retry_count": row.retry_count,
        "worker": row.worker,
        "error": row.error,
        "reason": reason,
        "reason_text": operator_text(row, detail) if operator else reason_text(reason),
        "detail": detail,
        "started_at": row.started_at,
        "ended_at": row.ended_at,
    }


def alert_rule_condition_text(rule: AlertRule) -> str:
    """What the rule watches, in words: "30% of runs failed in 60 min (at least 5 runs)"."""
    minutes = int(rule.window.total_seconds() // 60)
    if rule.kind == RuleKind.JOB_FAILURE_RATE:
        runs = f", at least {rule.min_runs} run{'s' if rule.min_runs != 1 else ''}"
        return f"{rule.threshold:.0%} of runs failed in {minutes} min{runs}"
    if rule.kind == RuleKind.JOB_CONSECUTIVE_FAILURES:
        return f"the last {int(rule.threshold)} runs all failed"
    if rule.kind == RuleKind.JOB_MISSED_RUNS:
        return f"a run due more than {int(rule.threshold)} s ago has not started"
    return rule.get_kind_display()


def alert_rule_data(rule: AlertRule) -> dict[str, Any]:
    """A customer's rule on the job page: what it watches, where it tells, whether it is firing
    (`firing_message` / `firing_since`, annotated by `customer_rules_with_state`)."""
    channels = []
    if rule.notify_email:
        channels.append("e-mail")
    if rule.notify_webhook and rule.webhook_url:
        channels.append(f"webhook {rule.webhook_url}")
    message = getattr(rule, "firing_message", None)
    return {
        "id": rule.pk,
        "name": rule.name,
        "kind_label": rule.get_kind_display(),
        "condition": alert_rule_condition_text(rule),
        "channels": ", ".join(channels) or "-",
        "firing": message is not None,
        "firing_message": message or "",
        "firing_since": getattr(rule, "firing_since", None),
    }


def repeats_grouped(rows: list[dict[str, Any]], *, key: tuple[str, ...]) -> list[dict[str, Any]]:
    """Consecutive rows equal in every `key` field and with an error, as one: the first row of
    each run of repeats, with `times` (how many), `rows` (all of them, in order) and `first` /
    `last` (the first and the last row). The same error seven times is one line, "7 times"
    (issue 28), not seven; a row without an error is never grouped."""
    groups: list[dict[str, Any]] = []
    for row in rows:
        head = groups[-1] if groups else None
        if head is not None and row.get("error") and all(head[k] == row.get(k) for k in key):
            head["times"] += 1
            head["rows"].append(row)
            head["last"] = row
            continue
        groups.append({**row, "times": 1, "rows": [row], "first": row, "last": row})
    return groups


def attempt_data(row: TaskExecutionHistory, *, workflow: str) -> dict[str, Any]:
    """One attempt of a step on the run page: the step by its label (scheduler.workflows
    .step_label_of, as the timeline), its outcome, its error in a sentence and raw."""
    error = row.error if row.status != TaskExecutionHistory.Status.SUCCEEDED else ""
    name = row.step.name if row.step is not None else ""
    return {
        "step": name,
        "step_label": step_label_of(workflow, name) if name else "",
        "compensation": row.step is not None and row.step.kind == Step.Kind.COMPENSATION,
        "status": row.status,
        "status_label": row.get_status_display(),
        "started_at": row.started_at,
        "ended_at": row.ended_at,
        "error": error,
        "reason": attempt_reason(error),
    }


def step_data(step: Step, *, workflow: str) -> dict[str, Any]:
    """A step of a job's run: its label (the one label function), state, attempts, and its last
    error in a sentence (raw on demand)."""
    return {
        "name": step.name,
        "label": step_label_of(workflow, step.name),
        "compensation": step.kind == Step.Kind.COMPENSATION,
        "state": step.process_state,
        "state_label": step.get_process_state_display(),
        "attempts": step.attempts,
        "error": step.last_error,
        "reason": attempt_reason(step.last_error),
    }

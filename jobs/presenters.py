"""A job, its runs and its history as plain data: what the API returns and the pages show.

Reads only what the scheduler's job selectors returned (`job_list` annotates `next_run_at`,
`last_run_state` and `last_run_at`); nothing here queries or writes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from scheduler.dispatcher.selectors import job_schedule_text
from scheduler.models import Job, Run, RunState, TaskExecutionHistory
from supervisor.models import AlertRule, RuleKind

ACTIVE, PAUSED, FINISHED = "active", "paused", "finished"
# Why an occurrence's run started, in words (the engine's codes; a skipped or buffered
# occurrence's reason is already a sentence and is shown as it is).
START_REASONS = {
    "schedule": "On schedule",
    "run_now": "Run now",
    "catch_up": "Caught up after downtime",
    "backfill": "Backfill",
    "retry": "Retry",
    "buffered": "Was buffered behind the previous run",
    "cancel_other": "Replaced the cancelled run",
}
STATE_LABELS = {ACTIVE: "Active", PAUSED: "Paused", FINISHED: "Finished"}


def job_state(job: Job) -> str:
    """active, paused (a person stopped it) or finished (nothing more will run)."""
    if not job.enabled:
        return PAUSED
    if job.finished_at is not None:
        return FINISHED
    return ACTIVE


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def job_data(job: Job) -> dict[str, Any]:
    """Every field of the job, as the API's `JobSerializer` and the pages read it."""
    last_state = getattr(job, "last_run_state", None)
    last_at = getattr(job, "last_run_at", None)
    state = job_state(job)
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
        "last_run": None
        if last_state is None
        else {"state": last_state, "label": RunState(last_state).label, "at": last_at},
        "created_at": job.created_at,
        "updated_at": job.updated_at,
    }


def run_data(run: Run, *, outputs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A run as the API's `JobRunSerializer` and the pages read it; `outputs`: what its steps
    returned (scheduler.outputs.runs_outputs, read by the caller for the page's runs)."""
    return {
        "id": run.pk,
        "state": run.state,
        "state_label": run.get_state_display(),
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


def history_data(row: TaskExecutionHistory) -> dict[str, Any]:
    detail = row.detail if isinstance(row.detail, dict) else {}
    reason = str(detail.get("reason") or "")
    operator = row.kind == TaskExecutionHistory.Kind.OPERATOR
    return {
        "id": row.pk,
        "status": row.status,
        "status_label": row.get_status_display(),
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

"""The state store's records of what happened: one `TaskExecutionHistory` row per attempt (and
per ignored reply, requeue, skip), and the run event log (`RunEvent`) that pages, webhooks and
alerts read. Both are written alongside the transitions and never updated in place; they change
when what is recorded changes, not when a run's or a step's state machine does.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.models import Q

from scheduler.ids import uuid7

from .base import NON_NEGATIVE, row_check
from .jobs import Job
from .runs import Run, Step


class HistoryStatus(models.TextChoices):
    STARTED = "started", "Started"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED_TRANSIENT = "failed_transient", "Failed (transient)"
    FAILED_PERMANENT = "failed_permanent", "Failed (permanent)"
    TIMED_OUT = "timed_out", "Timed out"
    CANCELLED = "cancelled", "Cancelled"
    IGNORED = "ignored", "Ignored (stale lease)"
    RETRY_SCHEDULED = "retry_scheduled", "Retry scheduled"
    ERRORED = "errored", "Marked Error"
    # The attempt never reached the remote service (its breaker was open, the connection was
    # refused): back to Pending, no failure counted.
    DEFERRED = "deferred", "Deferred (did not reach the service)"
    # No agent started the attempt before its start-by (workers down or busy): sent again, no
    # failure counted.
    REQUEUED = "requeued", "Not started in time (sent again)"
    ACTION = "action", "Action"
    # A page of a paginated step committed: the step is sent again at once for the next page,
    # no failure counted.
    CONTINUED = "continued", "Page done (next page sent)"
    # Job occurrences (kind "job"): a run attempt ended as its run did, or the occurrence did
    # not start (skipped) or waits (buffered), with the reason in `detail`.
    COMPENSATED = "compensated", "Compensated"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"
    BUFFERED = "buffered", "Buffered (waits for the running one)"


# An attempt that ended with an answer or a timeout: what a service's failure rate counts
# (alerting/failure_conditions.py repeats this list in its SQL, so the partial index applies).
ATTEMPT_ENDED_STATUSES = ("succeeded", "failed_transient", "failed_permanent", "timed_out")


class TaskExecutionHistory(models.Model):
    """One row per attempt of a step, plus rows for ignored replies and supervisor decisions;
    and (kind "job", `job` set, no step) one row per attempt of a job occurrence - the seed's
    JobId, StartTime, CompletedTime, Status, RetryCount - and per occurrence skipped or
    buffered, with why in `detail["reason"]`."""

    class Kind(models.TextChoices):
        ATTEMPT = "attempt", "Attempt"
        LATE_REPLY = "late_reply", "Ignored reply"
        SUPERVISOR = "supervisor", "Supervisor decision"
        SCHEDULER = "scheduler", "Scheduler decision"
        OPERATOR = "operator", "Operator action"
        JOB = "job", "Job occurrence"

    Status = HistoryStatus

    # No foreign-key constraints in the database (db_constraint=False), here and on the events and
    # the operators' audit: dropping an expired partition would drop its constraints' triggers on
    # scheduler_run, _step and _job, which takes an ACCESS EXCLUSIVE lock on each of those hot
    # tables (decision record 51). Django still applies on_delete; the engine's SQL writes ids
    # it has just read.
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.CASCADE, related_name="history", db_constraint=False
    )
    # No indexes of their own: history_run_started_idx (run_id, started_at) and
    # history_job_started_idx (job_id, started_at) WHERE job_id IS NOT NULL serve them
    # (history_job_rows_idx a job's own rows).
    run = models.ForeignKey(
        Run,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="history",
        db_index=False,
        db_constraint=False,
    )
    job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="history",
        db_index=False,
        db_constraint=False,
    )
    # The job occurrence's scheduled time (job rows only).
    scheduled_for = models.DateTimeField(null=True, blank=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.ATTEMPT)
    status = models.CharField(max_length=20, choices=Status.choices)
    lease = models.UUIDField(null=True, blank=True)
    retry_count = models.IntegerField(default=0, validators=NON_NEGATIVE)
    worker = models.CharField(max_length=200, blank=True, default="")
    error = models.TextField(blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # The owner (user id) of the row, for the tenant keys (issue 29): the primary key in the
    # database is (id, started_at, owner_id), the table range-partitioned by started_at (decision
    # record 42). Filled by the database on insert from the run's (or the job's) owner when the
    # writer leaves it out; 0 for a run with no owner. Never null in the table.
    owner_id = models.IntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The owner's user id (filled on insert; 0: no owner).",
    )

    class Meta:
        verbose_name_plural = "task execution history"
        ordering = ["started_at", "id"]
        constraints = [
            # A known status, a non-negative retry count (sas_history_row_valid).
            models.CheckConstraint(
                condition=row_check("sas_history_row_valid", "status", "retry_count"),
                name="history_row_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["run", "started_at"], name="history_run_started_idx"),
            # The open attempt for a lease is looked up on every reply.
            models.Index(fields=["lease"], name="history_lease_idx", condition=Q(lease__isnull=False)),
            # A job's history, newest first (the API and admin filter by job).
            models.Index(
                fields=["job", "-started_at"], name="history_job_started_idx", condition=Q(job__isnull=False)
            ),
            # The job page's and the API's history (`job_history`: the job's own rows, not its
            # runs' attempts), in their order: its count and its pages read this index only.
            models.Index(
                "job",
                models.F("started_at").desc(),
                models.F("id").desc(),
                name="history_job_rows_idx",
                condition=Q(job__isnull=False, kind__in=["job", "operator"]),
            ),
            # A remote service's failure rate over a window (the alert rule, issue 21): the
            # attempts of that window only, never the whole history. Ended attempts only: a
            # predicate the reply's lookup by lease (kind = attempt) does not imply, so on a small
            # table the planner never takes this index for it (history_lease_idx stays).
            models.Index(
                fields=["started_at"],
                name="history_attempt_started_idx",
                condition=Q(kind="attempt", status__in=ATTEMPT_ENDED_STATUSES),
            ),
        ]

    def __str__(self) -> str:
        if self.job_id and not self.step_id:
            return f"{self.kind} {self.status} job={self.job_id}"
        return f"{self.kind} {self.status} step={self.step_id}"


class RunEvent(models.Model):
    """A state change of a run, kept in order; the source for the status page and webhooks."""

    class Type(models.TextChoices):
        RECEIVED = "received", "Received"
        STARTED = "started", "Started"
        STEP_STARTED = "step_started", "Step started"
        STEP_COMPLETED = "step_completed", "Step completed"
        STEP_RETRYING = "step_retrying", "Step retrying"
        STEP_FAILED = "step_failed", "Step failed"
        # A forward step no attempt of which reached its service: nothing to undo.
        COMPENSATION_SKIPPED = "compensation_skipped", "Compensation skipped"
        COMPLETED = "completed", "Completed"
        COMPENSATING = "compensating", "Compensating"
        COMPENSATED = "compensated", "Compensated"
        CANCELLED = "cancelled", "Cancelled"
        FAILED = "failed", "Failed"

    # Unique with the partition key and the owner (runevent_event_id_unique): a partitioned
    # table's unique keys hold its partition key. A uuid7 is unique on its own anyway.
    event_id = models.UUIDField(default=uuid7, editable=False)
    # No index of its own: event_run_id_idx (run_id, id) serves lookups by run.
    # No foreign-key constraints in the database: see TaskExecutionHistory.step.
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="events", db_index=False, db_constraint=False
    )
    step = models.ForeignKey(
        Step, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", db_constraint=False
    )
    type = models.CharField(max_length=30, choices=Type.choices)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The owner (user id) of the row, for the tenant keys (issue 29): the primary key in the
    # database is (id, created_at, owner_id), the table range-partitioned by created_at (decision
    # record 42). Filled by the database on insert from the run's (or the job's) owner when the
    # writer leaves it out; 0 for a run with no owner. Never null in the table.
    owner_id = models.IntegerField(
        null=True,
        blank=True,
        editable=False,
        help_text="The owner's user id (filled on insert; 0: no owner).",
    )

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "id"], name="event_run_id_idx")]
        constraints = [
            models.UniqueConstraint(
                fields=["event_id", "created_at", "owner_id"], name="runevent_event_id_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.type} run={self.run_id}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "event_id": str(self.event_id),
            "run_id": str(self.run_id),
            "type": self.type,
            "step": self.data.get("step"),
            "data": self.data,
            "at": self.created_at.isoformat(),
        }

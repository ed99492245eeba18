"""The operator's audit: one row per action an operator took (issue 21; moved from supervisor in
issue 27, the table renamed, not copied)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class OperatorAction(models.Model):
    """The audit of one operator action (who, when, what, why), shown on the run's page.

    Written by the operator's audited services (`ops/run_services.py`, `ops/bulk.py`,
    `ops/services.py`) in the transaction of the transition they make, so a refused or
    rolled-back action leaves no entry. The custom permissions below are the actions' own,
    named `ops.<codename>` (roles: `ops/roles.py`). Moved here from `supervisor` without moving
    data (issue 27: `ops/migrations/0003_operator_action_moved.py`)."""

    class Action(models.TextChoices):
        RESUBMIT_STEP = "resubmit_step", "Resubmit step (Error -> Pending)"
        RESUBMIT_RUN = "resubmit_run", "New run of the same input"
        COMPENSATE_RUN = "compensate_run", "Compensate run on purpose"
        RETRY_COMPENSATION = "retry_compensation", "Retry compensation step now"
        MARK_COMPENSATION_DONE = "mark_compensation_done", "Mark compensation done by hand"
        BREAKER_OPEN = "breaker_open", "Open circuit breaker by hand"
        BREAKER_CLOSE = "breaker_close", "Close circuit breaker by hand"
        BULK_RESUBMIT = "bulk_resubmit", "Bulk resubmit"
        CANCEL_RUN = "cancel_run", "Cancel run"
        RESUME_COMPENSATION = "resume_compensation", "Resume compensation (Failed -> Compensating)"
        GIVE_UP_RUN = "give_up_run", "Give run up (Compensating -> Failed)"
        PAUSE = "pause", "Pause a customer or a workflow"
        RESUME = "resume", "Resume a paused customer or workflow"

    action = models.CharField(max_length=40, choices=Action.choices)
    # No foreign-key constraints in the database (the table is partitioned by month and retention
    # drops its partitions): see scheduler.models.history.TaskExecutionHistory.step.
    run = models.ForeignKey(
        "scheduler.Run",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="operator_actions",
        db_constraint=False,
    )
    step = models.ForeignKey(
        "scheduler.Step",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    # A resubmitted run's new run (RESUBMIT_RUN): the link between the two.
    new_run = models.ForeignKey(
        "scheduler.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="resubmitted_from",
        db_constraint=False,
    )
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_constraint=False,
    )
    # The operator's name as it was (kept if the user is deleted), as in the history: admin:<username>.
    actor_name = models.CharField(max_length=200)
    reason = models.TextField()
    # What was acted on when there is no run (a breaker's name), and what the action did.
    target = models.CharField(max_length=200, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["run", "-created_at"], name="opaction_run_idx", condition=Q(run__isnull=False)
            ),
            models.Index(fields=["new_run"], name="opaction_new_run_idx", condition=Q(new_run__isnull=False)),
        ]
        permissions = [
            ("resubmit_step", "Can resubmit a step in Error, or start a new run of a compensated run"),
            ("compensate_run", "Can compensate a run on purpose"),
            ("retry_compensation", "Can retry a failing compensation step now"),
            ("mark_compensation_done", "Can mark a compensation done by hand"),
            ("operate_breaker", "Can open or close a circuit breaker by hand"),
            ("bulk_resubmit", "Can resubmit failed steps in bulk"),
            ("view_sweep_preview", "Can see the dry run of the supervisor's next sweep"),
        ]

    def __str__(self) -> str:
        return f"{self.get_action_display()} by {self.actor_name} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class RetentionPolicy(models.Model):
    """A customer's shorter retention (issue 29): their terminal runs (with steps, events and
    attempt history) and their jobs' occurrence history are purged after `runs_days` instead of
    the platform's SAS_RETENTION_RUNS_DAYS, in the storage maintenance's bounded batches
    (ops/storage/purge.py). Longer than the platform's has no effect: partitions past the
    platform's retention are dropped for everyone."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="retention_policy"
    )
    runs_days = models.PositiveIntegerField(
        help_text="Days a finished run and its history are kept for this customer (at least 1)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "retention policies"
        constraints = [models.CheckConstraint(condition=Q(runs_days__gte=1), name="retention_days_positive")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.runs_days} days"

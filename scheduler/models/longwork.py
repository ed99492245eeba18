"""Long work (issue 9): a paginated step's checkpoint and a heartbeat step's status."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Now

from .runs import Run, Step


class Checkpoint(models.Model):
    """Seed 004's Checkpoint table: where a paginated step is in its input (one row per step).

    Each page's effect and this row's advance commit in one transaction that holds the step's
    row (its lease checked) - so a page is applied once, and a step killed at any point resumes
    at `page_start`. `page_start` is the domain's cursor: the key (or offset) the next page
    starts after; the engine only stores it and compares it (`checkpoint_advance`).
    """

    step = models.OneToOneField(Step, on_delete=models.CASCADE, related_name="checkpoint")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="checkpoints")
    page_size = models.PositiveIntegerField(help_text="Rows per page (one short attempt each).")
    page_start = models.BigIntegerField(
        default=0, help_text="Where the next page starts: the domain's cursor (last key done, or offset)."
    )
    pages_done = models.PositiveIntegerField(default=0)
    rows_done = models.BigIntegerField(default=0)
    total = models.BigIntegerField(null=True, blank=True, help_text="Rows in the whole input, once known.")
    completed = models.BooleanField(default=False, help_text="The last page is done.")
    started_at = models.DateTimeField(null=True, blank=True, help_text="When the first page began.")
    updated_at = models.DateTimeField(db_default=Now(), help_text="When the last page committed.")

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(page_size__gt=0), name="checkpoint_page_size_positive"),
            models.CheckConstraint(condition=Q(rows_done__gte=0), name="checkpoint_rows_done_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"checkpoint of step {self.step_id}: {self.pages_done} pages, at {self.page_start}"


class HeartbeatState(models.TextChoices):
    WAITING = "waiting", "Waiting"
    IN_PROGRESS = "in_progress", "In progress"
    COMPLETED = "completed", "Completed"


class HeartbeatStatus(models.Model):
    """Seed 004's JobStatus table, for a heartbeat step (one row per step): in progress or
    completed, and when its agent last said it was alive. Written by the `step_heartbeat` and
    `heartbeat_complete` transitions, fenced by the step's lease like the step itself."""

    Status = HeartbeatState

    step = models.OneToOneField(Step, on_delete=models.CASCADE, related_name="heartbeat_status")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="heartbeat_statuses")
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.WAITING)
    # The attempt whose heartbeats these are (a new attempt starts counting again).
    lease = models.UUIDField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    heartbeats = models.PositiveIntegerField(default=0, help_text="Heartbeats of the current attempt.")
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        verbose_name = "job status (heartbeat)"
        verbose_name_plural = "job statuses (heartbeat)"
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=HeartbeatState.values),
                name="heartbeatstatus_status_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.status} step={self.step_id}"

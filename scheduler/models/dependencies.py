"""Dependencies between jobs (issue 30, item 1): an edge parent -> child of one owner, with the
outcome of the parent that fires the child, and the gate that counts a child's parents'
outcomes for one logical time (fan-in). The rules: `scheduler/jobs.md`, "Dependencies"."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

from .jobs import OWNER_HELP, Job


class DependencyCondition(models.TextChoices):
    """Which ending of the parent's occurrence lets the child run."""

    ON_SUCCESS = "on_success", "On success (the parent's run completed)"
    ON_FAILURE = "on_failure", "On failure (the parent's run failed or was compensated, retries spent)"
    ON_EITHER = "on_either", "On either (succeeded or failed)"


class DependencyOutcome(models.TextChoices):
    """How a parent's occurrence ended, as its dependents see it."""

    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


class JobDependency(models.Model):
    """An edge: when the parent's occurrence T has ended as `condition` asks, the child runs for
    logical time T (once, with every other parent of the child also ended as its edge asks for
    T). Parent and child have one owner, the graph has no cycle, and neither is staff-only work a
    customer may not schedule: checked at save by `scheduler.services.dependencies`."""

    Condition = DependencyCondition

    parent = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="child_edges")
    child = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="parent_edges", db_index=False)
    condition = models.CharField(
        max_length=12,
        choices=DependencyCondition.choices,
        default=DependencyCondition.ON_SUCCESS,
        help_text="Which ending of the parent's occurrence lets the child run for its time.",
    )
    # The last outcome of the parent seen by this edge (shown on the job graph).
    last_outcome = models.CharField(max_length=12, blank=True, default="", db_default="")
    last_logical_time = models.DateTimeField(null=True, blank=True)
    # Whether that outcome matched the condition.
    last_matched = models.BooleanField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # The owner of both jobs, for the tenant keys (decision record 55): the primary key in the
    # database is (id, owner_id), both foreign keys (parent_id, owner_id) and (child_id,
    # owner_id) - so the database, too, refuses an edge between two owners' jobs. Filled on
    # insert from the child when the writer leaves it out.
    owner_id = models.IntegerField(null=True, blank=True, editable=False, help_text=OWNER_HELP)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["child", "parent", "owner_id"], name="jobdependency_edge_unique"),
            models.CheckConstraint(condition=~Q(parent=F("child")), name="jobdependency_not_self"),
            models.CheckConstraint(
                condition=Q(condition__in=DependencyCondition.values), name="jobdependency_condition_valid"
            ),
            models.CheckConstraint(
                condition=Q(last_outcome="") | Q(last_outcome__in=DependencyOutcome.values),
                name="jobdependency_last_outcome_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.parent_id} -> job {self.child_id} ({self.condition})"


class DependencyGate(models.Model):
    """One child's logical time T: which parents have ended for T (`arrived`), whether one ended
    against its edge's condition (`blocked`, why), and when the child's run for T was queued
    (`fired_at`). UNIQUE (child, logical_time): the settle that completes the gate inserts the
    child's queued row once, under the gate's row lock, whatever dispatchers race."""

    child = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependency_gates", db_index=False)
    logical_time = models.DateTimeField()
    arrived = ArrayField(models.BigIntegerField(), default=list)
    blocked = models.TextField(blank=True, default="", db_default="")
    fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # The child's owner (decision record 55), as JobDependency.owner_id.
    owner_id = models.IntegerField(null=True, blank=True, editable=False, help_text=OWNER_HELP)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["child", "logical_time", "owner_id"], name="dependencygate_child_time_unique"
            )
        ]

    def __str__(self) -> str:
        return f"gate of job {self.child_id} for {self.logical_time:%Y-%m-%d %H:%M:%S}"

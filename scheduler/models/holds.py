"""Pauses (issue 30): an operator holds a whole owner (tenant) or a whole workflow. The engine
knows no domain - a pause names an owner id or a workflow name, nothing else. While a row is
here, no step of its scope is claimed and no occurrence of its jobs is fired
(scheduler/sql/holds.sql); deleting it resumes."""

from __future__ import annotations

from datetime import UTC, datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

# What a held step's not_before and a held job occurrence's next_execution_at are: holds.sql's
# sas_held() (year 9999, the last Python can load; tests/scheduler/test_holds.py pins the two).
HELD = datetime(9999, 12, 31, tzinfo=UTC)


class Pause(models.Model):
    class Scope(models.TextChoices):
        OWNER = "owner", "Customer"
        WORKFLOW = "workflow", "Workflow"

    scope = models.CharField(max_length=20, choices=Scope.choices)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="pauses",
        help_text="The customer paused (scope customer).",
    )
    workflow = models.CharField(
        max_length=100, blank=True, default="", help_text="The workflow paused (scope workflow)."
    )
    reason = models.TextField(help_text="Why - shown to the customer on their pages and in the API.")
    paused_by = models.CharField(max_length=150, help_text="The operator who paused it.")
    created_at = models.DateTimeField(db_default=models.functions.Now())

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(scope="owner") & Q(owner__isnull=False) & Q(workflow=""))
                | (Q(scope="workflow") & Q(owner__isnull=True) & ~Q(workflow="")),
                name="pause_scope_valid",
            ),
            models.UniqueConstraint(fields=["owner"], condition=Q(scope="owner"), name="pause_owner_unique"),
            models.UniqueConstraint(
                fields=["workflow"], condition=Q(scope="workflow"), name="pause_workflow_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"pause of {self.scope} {self.owner_id if self.scope == 'owner' else self.workflow}"

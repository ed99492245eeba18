"""Operator alerts: raised when a step runs out of retries or a compensation cannot finish."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Alert(models.Model):
    class Severity(models.TextChoices):
        WARNING = "warning", "Warning"
        CRITICAL = "critical", "Critical"

    class Kind(models.TextChoices):
        STEP_FAILED = "step_failed", "Step failed"
        COMPENSATION_FAILED = "compensation_failed", "Compensation failed"

    run = models.ForeignKey("scheduler.Run", on_delete=models.CASCADE, related_name="alerts")
    step = models.ForeignKey(
        "scheduler.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    kind = models.CharField(max_length=30, choices=Kind.choices)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    message = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["-created_at"], name="alert_open_idx", condition=Q(acknowledged_at__isnull=True)
            )
        ]

    def __str__(self) -> str:
        return f"[{self.severity}] {self.kind}: {self.message[:60]}"

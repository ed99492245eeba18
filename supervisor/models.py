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
        # A compensation passed its alert threshold and is still being retried.
        COMPENSATION_STRUGGLING = "compensation_struggling", "Compensation keeps failing"

    run = models.ForeignKey("scheduler.Run", on_delete=models.CASCADE, related_name="alerts")
    step = models.ForeignKey(
        "scheduler.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    kind = models.CharField(max_length=30, choices=Kind.choices)
    severity = models.CharField(max_length=10, choices=Severity.choices, default=Severity.WARNING)
    message = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    # One alert per incident: while an alert with the same key is unacknowledged, the same
    # cause raised again counts on it instead of adding a row (a 5-minute outage is one alert,
    # not one per order).
    key = models.CharField(
        max_length=200, blank=True, default="", help_text="What makes two alerts the same incident."
    )
    count = models.PositiveIntegerField(default=1, help_text="How often this incident was raised.")
    last_seen_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["-created_at"], name="alert_open_idx", condition=Q(acknowledged_at__isnull=True)
            ),
        ]
        constraints = [
            # At most one open alert per incident: concurrent raisers meet here (INSERT ... ON
            # CONFLICT in supervisor/alerts.py), so an outage failing many orders at once in
            # many worker processes still makes one alert.
            models.UniqueConstraint(
                fields=["key"],
                condition=Q(acknowledged_at__isnull=True) & ~Q(key=""),
                name="alert_open_key_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"[{self.severity}] {self.kind}: {self.message[:60]}"

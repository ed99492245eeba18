"""Operator alerting (issue 21): alert rules as rows, one alert per incident, the runs it affects.

A rule (`AlertRule`) names a condition kind, its target, threshold, window, for-duration,
severity, cooldown and channels. Conditions are evaluated from the database by the alerting
app's periodic evaluator (alerting/conditions.py) - and three of them are also raised at once by
the engine's signals (a step in Error, a run needing an operator, a compensation that keeps
failing; alerting/receivers.py). Both paths write the same `Alert` rows through
alerting/transitions.py, so there is one system: an incident is one row per (rule, subject) while
open, with every affected run linked (`AlertRun`), resolved when its condition clears.

These models were the supervisor's until issue 27: moved without moving data (alerting 0002
renamed the tables `supervisor_*` -> `alerting_*` and moved their content types, so the
permissions and the groups holding them followed; docs/decisions.md, record 38).
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q

from sasproject.names import control_characters_refuse, recipients_validate


class AlertSeverity(models.TextChoices):
    INFO = "info", "Info"
    WARNING = "warning", "Warning"
    CRITICAL = "critical", "Critical"


class RuleKind(models.TextChoices):
    # Failure rates over `window`, with at least `min_runs` runs/attempts; `threshold` 0..1.
    WORKFLOW_FAILURE_RATE = "workflow_failure_rate", "Failure rate of a workflow"
    JOB_FAILURE_RATE = "job_failure_rate", "Failure rate of a job"
    SERVICE_FAILURE_RATE = "service_failure_rate", "Failure rate of a remote service"
    # The last `threshold` runs of a job all failed.
    JOB_CONSECUTIVE_FAILURES = "job_consecutive_failures", "Consecutive failures of a job"
    # A job occurrence due more than `threshold` seconds ago has not fired.
    JOB_MISSED_RUNS = "job_missed_runs", "Missed runs of a job"
    # Raised by the engine's signals at once, and kept open by the evaluator while true.
    STEP_ERROR = "step_error", "A step in Error"
    RUN_NEEDS_OPERATOR = "run_needs_operator", "A run needing an operator"
    COMPENSATION_STRUGGLING = "compensation_struggling", "A compensation that keeps failing"
    # A breaker open for longer than `threshold` seconds.
    CIRCUIT_OPEN = "circuit_open", "A circuit open longer than N seconds"
    # More than `threshold` steps Processing past their complete-by.
    STEPS_OVERDUE = "steps_overdue", "Steps overdue"
    # A broker queue with messages and no live worker consuming it.
    QUEUE_NO_CONSUMER = "queue_no_consumer", "A queue with work and no consumer"
    # The oldest due job occurrence is more than `threshold` seconds late.
    DISPATCH_LAG = "dispatch_lag", "Dispatch lag over a threshold"
    # More than `threshold` job occurrences are due.
    DUE_BACKLOG = "due_backlog", "Due backlog over a threshold"
    # A periodic task (the supervisor's sweep, the jobs dispatcher) has not run within
    # `threshold` times its interval. A dead man's switch: see docs/decisions.md, record 10.
    PERIODIC_NOT_RUN = "periodic_not_run", "The supervisor or the dispatcher not run within N x its interval"


# The kinds a customer may put on their own jobs (seed 004: per-user alerting).
CUSTOMER_RULE_KINDS = (
    RuleKind.JOB_FAILURE_RATE,
    RuleKind.JOB_CONSECUTIVE_FAILURES,
    RuleKind.JOB_MISSED_RUNS,
)


class AlertRule(models.Model):
    Kind = RuleKind
    Severity = AlertSeverity

    name = models.CharField(
        max_length=100,
        # The subject of the rule's e-mails: a CR/LF there made Django refuse them (issue 26).
        validators=[control_characters_refuse],
        help_text="Shown in the alert and its notifications (the e-mail's subject): no control characters.",
    )
    kind = models.CharField(max_length=40, choices=RuleKind.choices)
    target = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text=(
            "What the rule watches: a workflow name, a step name, a service (inventory), a queue "
            "(agent.payment), a periodic task row ('sas: supervisor sweep'). Empty: each one seen "
            "(one incident per subject). Job rules use the job field instead."
        ),
    )
    job = models.ForeignKey(
        "scheduler.Job",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
        help_text="Job rules: this job only (empty: every job; operators only).",
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="alert_rules",
        help_text="A customer's own rule (on their own job), notifying only them. Empty: an operator rule.",
    )
    threshold = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0)],
        help_text=(
            "Failure rates: a fraction 0..1. Consecutive failures, steps overdue, due backlog: a "
            "count. Circuit open, dispatch lag, missed runs: seconds. Periodic not run: N x interval."
        ),
    )
    min_runs = models.PositiveIntegerField(
        default=5, help_text="Failure rates: fire only with at least this many runs in the window."
    )
    window = models.DurationField(
        default=timedelta(minutes=15), help_text="How far back failure rates and Error steps look."
    )
    for_duration = models.DurationField(
        default=timedelta(0),
        help_text="The condition must hold this long before the alert fires (pending until then).",
    )
    cooldown = models.DurationField(
        default=timedelta(minutes=5),
        help_text=(
            "At most one page per subject within this time: an incident that clears and comes "
            "back is a new alert (it waits out its for-duration again), but its first page waits "
            "until this time has passed since the subject's last page; if it clears before, "
            "nobody is told it began or ended."
        ),
    )
    severity = models.CharField(max_length=10, choices=AlertSeverity.choices, default=AlertSeverity.WARNING)
    notify_email = models.BooleanField(default=True, help_text="Send an e-mail on firing and on resolution.")
    recipients = models.TextField(
        blank=True,
        default="",
        # Each one an address: a CR/LF here made Django refuse the e-mail (issue 26).
        validators=[recipients_validate],
        help_text=(
            "Comma-separated e-mail addresses. Empty: ADMINS (operator rules) or the owner's "
            "e-mail (customer rules, which always go to the owner only)."
        ),
    )
    notify_webhook = models.BooleanField(default=False, help_text="POST a signed JSON notification.")
    webhook_url = models.CharField(
        max_length=500,
        blank=True,
        default="",
        help_text="Empty: SAS_ALERT_WEBHOOK_URL (operator rules). Checked by the egress policy.",
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "name"], name="alertrule_owner_name_unique"),
            models.UniqueConstraint(
                fields=["name"], condition=Q(owner__isnull=True), name="alertrule_operator_name_unique"
            ),
            models.CheckConstraint(condition=Q(kind__in=RuleKind.values), name="alertrule_kind_valid"),
            models.CheckConstraint(condition=Q(threshold__gte=0), name="alertrule_threshold_nonnegative"),
            # A customer's rule is on one of their jobs, of a kind customers may use.
            models.CheckConstraint(
                condition=Q(owner__isnull=True)
                | (Q(job__isnull=False) & Q(kind__in=[k.value for k in CUSTOMER_RULE_KINDS])),
                name="alertrule_customer_on_a_job",
            ),
        ]
        indexes = [
            models.Index(fields=["kind"], name="alertrule_enabled_kind_idx", condition=Q(enabled=True))
        ]

    def __str__(self) -> str:
        return self.name


class AlertState(models.TextChoices):
    # The condition holds but not yet for the rule's for-duration: nobody is told.
    PENDING = "pending", "Pending"
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"


ALERT_OPEN_STATES = (AlertState.PENDING, AlertState.FIRING)


class Alert(models.Model):
    """One incident of one rule and subject (a workflow, a step name, a service...)."""

    Severity = AlertSeverity
    Kind = RuleKind
    State = AlertState

    rule = models.ForeignKey(
        AlertRule, null=True, blank=True, on_delete=models.CASCADE, related_name="alerts"
    )
    # The first affected run (kept for the older pages); every affected run is in AlertRun.
    run = models.ForeignKey(
        "scheduler.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    step = models.ForeignKey(
        "scheduler.Step", null=True, blank=True, on_delete=models.SET_NULL, related_name="alerts"
    )
    kind = models.CharField(max_length=40, choices=RuleKind.choices)
    severity = models.CharField(max_length=10, choices=AlertSeverity.choices, default=AlertSeverity.WARNING)
    subject = models.CharField(
        max_length=200, blank=True, default="", help_text="What the incident is about."
    )
    message = models.TextField()
    state = models.CharField(max_length=10, choices=AlertState.choices, default=AlertState.FIRING)
    created_at = models.DateTimeField(auto_now_add=True)
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # One alert per incident: while an alert with the same key is open, the same cause raised
    # again counts on it instead of adding a row (a 5-minute outage is one alert, not one per
    # order). The key is "<rule id>:<subject>".
    key = models.CharField(max_length=300, help_text="What makes two alerts the same incident.")
    count = models.PositiveIntegerField(
        default=1, help_text="Occurrences: runs affected, or times raised when no run is involved."
    )
    last_seen_at = models.DateTimeField(null=True, blank=True)
    # The outbox of announcements: the last state announced on the rule's channels. An alert
    # whose state differs from it is announced by the evaluator's next tick (cooldown allowing).
    announced_state = models.CharField(max_length=10, blank=True, default="")
    announced_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # Open alerts (the admin panel, the evaluator's "what is open" read).
            models.Index(fields=["rule", "key"], name="alert_open_rule_idx", condition=~Q(state="resolved")),
            # Announcements not yet made: the outbox read of every tick.
            models.Index(
                fields=["id"],
                name="alert_unannounced_idx",
                condition=~Q(state=models.F("announced_state")) & ~Q(state="pending"),
            ),
            # The cooldown: when a key last paged (alert_announcements_claim), read by key.
            models.Index(fields=["key", "-resolved_at"], name="alert_key_resolved_idx"),
        ]
        constraints = [
            # At most one open alert per incident: concurrent raisers meet here (INSERT ... ON
            # CONFLICT in alerting/transitions.py), so an outage failing many orders at once in
            # many worker processes still makes one alert.
            models.UniqueConstraint(
                fields=["key"], condition=~Q(state="resolved"), name="alert_open_key_unique"
            ),
            models.CheckConstraint(condition=Q(state__in=AlertState.values), name="alert_state_valid"),
        ]

    def __str__(self) -> str:
        return f"[{self.severity}] {self.kind} {self.subject}: {self.message[:60]}"

    @property
    def is_open(self) -> bool:
        return self.state != AlertState.RESOLVED


class AlertRun(models.Model):
    """A run affected by an alert: every one, not only the first (the "needs attention" list)."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="links")
    run = models.ForeignKey("scheduler.Run", on_delete=models.CASCADE, related_name="alert_links")
    linked_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["alert", "run"], name="alertrun_unique")]
        indexes = [models.Index(fields=["run"], name="alertrun_run_idx")]

    def __str__(self) -> str:
        return f"alert {self.alert_id} - run {self.run_id}"

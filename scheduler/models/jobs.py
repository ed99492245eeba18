"""Jobs (seed 004): the job, what it will start next (ScheduledJob) and the dispatcher's shard
leases. The dispatcher that reads and writes them: `scheduler/dispatcher/`."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now

from sasproject.names import control_characters_refuse

# The owner column of the tables below a job (ScheduledJob, JobDependency, DependencyGate).
OWNER_HELP = "The job's owner (user id; filled on insert)."


class OverlapPolicy(models.TextChoices):
    """What an occurrence does when the job's previous run is still going (Temporal's names)."""

    SKIP = "skip", "Skip (the default)"
    BUFFER_ONE = "buffer_one", "Buffer one (start when the current run ends)"
    ALLOW_ALL = "allow_all", "Allow all (runs may overlap)"
    CANCEL_OTHER = "cancel_other", "Cancel other (cancel the running one, start when it has ended)"


class Job(models.Model):
    """Seed 004's Jobs row: a user's request to run a workflow once or on a cron schedule, with
    a retry budget. A job produces runs (`Run.job`); each run is an ordinary run of the
    workflow, claimed, supervised and compensated like any other. Its next occurrence is a
    `ScheduledJob` row; `scheduler/jobs.md` has the rules (overlap, misfire, retries).

    The seed keys jobs by (UserId, JobId) and shards by UserId: in the database the primary key
    is (id, owner_id) and every table below a job carries the owner in its keys and its foreign
    key to the job, what a distribution column (Citus) needs when one machine is not enough
    (decision record 55). Django's state keeps `id` as the primary key; a UNIQUE (id) stays for
    the alert rules' single-column foreign key (an operator's rule has no owner).
    """

    Overlap = OverlapPolicy

    # No index of its own: job_owner_created_idx and job_owner_name_unique lead with owner_id.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs", db_index=False
    )
    # No control character: the name reaches its alerts' e-mails (sasproject/names.py, issue 26).
    name = models.CharField(max_length=200, validators=[control_characters_refuse])
    workflow = models.CharField(max_length=100)
    # Already validated by the workflow when the job was created.
    input = models.JSONField(default=dict)
    is_recurring = models.BooleanField(default=False)
    # Five-field cron expression (minute hour day-of-month month day-of-week) for recurring jobs.
    cron = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="Five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, "
        "@weekly, @monthly, @yearly; empty for a one-off job.",
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA time zone the cron expression is read in."
    )
    # Runs that may follow a failed run of the same firing (seed 004's MaxRetry).
    max_retry = models.PositiveSmallIntegerField(
        default=0, help_text="Retries of an occurrence whose run ends Failed or Compensated."
    )
    retry_backoff = models.DurationField(
        default=timedelta(seconds=10),
        db_default=timedelta(seconds=10),
        help_text="Delay before the first retry; doubles with each retry (at most one hour).",
    )
    priority = models.SmallIntegerField(
        default=-10,
        help_text="Higher runs first. Customers choose from -1000 to -10, below all system work "
        "(orders, exports: 0; webhook deliveries: -1); staff may set -32768 to 32767 here "
        "(scheduler/limits.py).",
    )
    # A non-idempotent job never has two runs at once (seed 004's non-idempotent workers).
    idempotent = models.BooleanField(default=True)
    overlap_policy = models.CharField(
        max_length=20,
        choices=OverlapPolicy.choices,
        default=OverlapPolicy.SKIP,
        db_default=OverlapPolicy.SKIP,
        help_text="What an occurrence does while the job's previous run is still going.",
    )
    catchup_window = models.DurationField(
        null=True,
        blank=True,
        help_text="After downtime, occurrences missed within this window are fired, oldest first; "
        "empty: only the latest missed one fires.",
    )
    jitter = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Each occurrence starts up to this many seconds after its time (spreads load).",
    )
    start_at = models.DateTimeField(null=True, blank=True, help_text="No occurrence before this time.")
    end_at = models.DateTimeField(null=True, blank=True, help_text="No occurrence after this time.")
    run_at = models.DateTimeField(
        null=True, blank=True, help_text="One-off job: when it runs (empty: as soon as it is created)."
    )
    max_firings = models.PositiveIntegerField(
        null=True, blank=True, help_text="Stop after this many scheduled occurrences (empty: no limit)."
    )
    firing_count = models.PositiveIntegerField(
        default=0,
        db_default=0,
        help_text="Scheduled occurrences started or buffered so far, toward max firings (kept for "
        "a job with max firings only: the dispatcher does not write a job row per firing otherwise).",
    )
    # Paused = not enabled; the note says why (shown to the owner and operators).
    enabled = models.BooleanField(default=True)
    paused_note = models.TextField(blank=True, default="", db_default="")
    paused_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="No more occurrences (one-off fired, end time passed, max firings reached).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(is_recurring=True) & ~Q(cron="")) | (Q(is_recurring=False) & Q(cron="")),
                name="job_cron_iff_recurring",
            ),
            models.CheckConstraint(
                condition=Q(overlap_policy__in=OverlapPolicy.values), name="job_overlap_policy_valid"
            ),
            models.CheckConstraint(
                condition=Q(start_at__isnull=True) | Q(end_at__isnull=True) | Q(end_at__gt=F("start_at")),
                name="job_end_after_start",
            ),
            models.UniqueConstraint(fields=["owner", "name"], name="job_owner_name_unique"),
        ]
        indexes = [models.Index(fields=["owner", "-created_at"], name="job_owner_created_idx")]
        # Staff work (scheduler/permissions.py, issue 26): held by the "Operators" role only.
        permissions = [
            (
                "staff_work",
                "Can do staff work: schedule staff-only workflows, reprice the shared catalogue, "
                "read any user's report, send given-up webhook deliveries again",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.workflow}, {self.cron or 'once'})"


class ScheduledJobKind(models.TextChoices):
    # The schedule's next occurrence: exactly one row per job that has one (the seed's
    # NextExecutionTimestamp); rewritten in place as the schedule advances.
    NEXT = "next", "Next occurrence"
    # An occurrence accepted but not yet started: buffered behind the running run, a
    # replacement waiting for a cancelled run to end, a missed occurrence inside the catch-up
    # window, a backfilled one, a "run now" waiting for its turn.
    QUEUED = "queued", "Queued occurrence"
    # A new attempt of an occurrence whose run ended Failed or Compensated.
    RETRY = "retry", "Retry"


class ScheduledJob(models.Model):
    """What a job will start next, and when (the seed's ScheduledJob: NextExecutionTimestamp,
    JobId). The dispatcher claims rows with `next_execution_at <= now()` (database clock) from
    the partial index `scheduledjob_due_idx`, a range scan however many jobs there are.

    `next_execution_at` NULL means parked: the row waits for the job's running run to end (its
    end makes the oldest parked row due), or for the job to be resumed. `HELD` (year 9999) means
    held: the job's owner or workflow is paused by an operator (scheduler/holds.md); the resume
    gives it back its due time.
    """

    Kind = ScheduledJobKind

    # No index of its own: scheduledjob_occurrence_unique (job_id, scheduled_for, attempt)
    # serves every lookup by job (one index less to write per fired occurrence).
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="scheduled", db_index=False)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.NEXT)
    # Why the row exists: schedule, buffered, catch_up, backfill, run_now, cancel_other, retry.
    reason = models.CharField(max_length=20, default="schedule")
    # The occurrence's own time (cron time, run-at, or the moment of "run now"): what its run
    # carries as `Run.scheduled_for`.
    scheduled_for = models.DateTimeField()
    # 0 for an occurrence's first run; n for its n-th retry.
    attempt = models.PositiveSmallIntegerField(default=0)
    # When it is due: the occurrence time plus the job's jitter, or a retry's backoff. Null: parked.
    next_execution_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    # The job's owner, for the tenant keys (issue 29, decision record 55): the primary key in the
    # database is (id, owner_id), the foreign key to the job (job_id, owner_id). Filled by the
    # database on insert from the job when the writer leaves it out. Never null in the table.
    owner_id = models.IntegerField(null=True, blank=True, editable=False, help_text=OWNER_HELP)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ScheduledJobKind.values), name="scheduledjob_kind_valid"
            ),
            # One next occurrence per job (the owner last: the index still serves lookups by job).
            models.UniqueConstraint(
                fields=["job", "owner_id"], condition=Q(kind="next"), name="scheduledjob_one_next_per_job"
            ),
            # An occurrence's attempt is queued once.
            models.UniqueConstraint(
                fields=["job", "scheduled_for", "attempt", "owner_id"], name="scheduledjob_occurrence_unique"
            ),
        ]
        indexes = [
            # The dispatcher's claim: due rows in time order.
            models.Index(
                fields=["next_execution_at", "id"],
                name="scheduledjob_due_idx",
                condition=Q(next_execution_at__isnull=False),
            ),
            # A job's parked rows (made due, oldest first, when its run ends).
            models.Index(
                fields=["job", "scheduled_for", "attempt"],
                name="scheduledjob_parked_idx",
                condition=Q(next_execution_at__isnull=True),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} of job {self.job_id} for {self.scheduled_for:%Y-%m-%d %H:%M:%S}"


class DispatcherShard(models.Model):
    """A slice of the due work and its lease (issue 20): the dispatcher's claim takes only rows
    whose job hashes to the shard it holds, so K dispatcher processes on any hosts fire K slices
    at once. A tick takes a shard whose lease has ended (SKIP LOCKED, least recently ticked
    first), renews the lease with every batch and releases it when the slice is drained; a
    dispatcher killed mid-tick holds its shard until `leased_until` passes. The rows are written
    on demand for SAS["JOBS_DISPATCH_SHARDS"] (a setting: shards past it are not taken)."""

    shard = models.PositiveSmallIntegerField(primary_key=True)
    # Who holds it (host:pid of the dispatcher); kept after release, for operators.
    holder = models.CharField(max_length=200, default="", blank=True)
    # Held until then; null or past: free.
    leased_until = models.DateTimeField(null=True, blank=True)
    # When a dispatcher last drained it: the least recently ticked shard is taken first.
    ticked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"shard {self.shard}"

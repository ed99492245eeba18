"""The state store: runs and their steps (the history and the event log: `history.py`).

One `Step` row is the seed's state record (ProcessState, LockedBy, CompleteBy, FailureCount) plus
what a real implementation needs beside it: a lease token per claim (fencing), a `not_before` for
backoff, and an idempotency key that stays the same across attempts.

Hot-path queries are served by partial indexes that hold only the rows they act on:
`step_pending_owner_idx` and `step_pending_op_owner_idx` (the scheduler's fair claim),
`step_processing_deadline_idx` (the supervisor's sweep) and `step_pending_expiry_idx` (unstarted
job occurrences past their schedule-to-start deadline). Both stay small however large the table grows.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Coalesce, Now

from scheduler.ids import uuid7

from .base import NON_NEGATIVE, row_check
from .jobs import Job


class RunState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    COMPENSATING = "compensating", "Compensating"
    COMPENSATED = "compensated", "Compensated"
    CANCELLED = "cancelled", "Cancelled"
    # Terminal, and asks an operator to act: a compensation kept failing, so the run could
    # neither finish nor be fully undone. An Alert row says what is left.
    FAILED = "failed", "Failed (needs operator)"


# Runs still going: what a non-idempotent job checks before starting another (a partial index).
RUN_UNFINISHED_STATES = (RunState.PENDING, RunState.RUNNING, RunState.COMPENSATING)
RUN_TERMINAL_STATES = (RunState.COMPLETED, RunState.COMPENSATED, RunState.CANCELLED, RunState.FAILED)


class Run(models.Model):
    """One execution of a workflow."""

    State = RunState

    TERMINAL_STATES = RUN_TERMINAL_STATES
    UNFINISHED_STATES = RUN_UNFINISHED_STATES

    id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    workflow = models.CharField(max_length=100)
    input = models.JSONField(default=dict)
    # No index of its own: run_owner_created_idx (owner_id, created_at) serves lookups by owner.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="runs",
        db_index=False,
    )
    # The tenant key (issue 29, decision record 55): the owner, 0 for the platform's own runs
    # (the owner above is NULL there, and neither a primary key nor a distribution column takes a
    # NULL) - the value the run's steps and history carry. Computed by the database from the
    # owner, never written. The primary key in the database is (id, owner_key).
    owner_key = models.GeneratedField(
        expression=Coalesce("owner", 0),
        output_field=models.IntegerField(),
        db_persist=True,
        help_text="The owner's user id, 0 for the platform's own runs (the tenant key).",
    )
    # Higher runs first. Copied onto each step so the claim index can order by it.
    priority = models.SmallIntegerField(default=0)
    # Optional business deadline for the whole run: among equal priorities, earliest first.
    deadline = models.DateTimeField(null=True, blank=True)
    state = models.CharField(max_length=20, choices=State.choices, default=RunState.PENDING)
    cancel_requested = models.BooleanField(default=False)
    observed = models.BooleanField(
        default=False,
        db_default=False,
        help_text=(
            "Someone listens to this run's events (a webhook subscriber): its transitions send the "
            "run_event signal. Runs nobody watches cost no extra query per step."
        ),
    )
    # The job this run was produced by (seed 004), if any. A deleted job's runs stay (unlinked).
    # No index of its own: run_job_created_idx (job_id, created_at, id) WHERE job_id IS NOT NULL.
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="runs", db_index=False
    )
    # The job occurrence this run is an attempt of: its scheduled time and the attempt number
    # (0 first, n the n-th retry). Unique per job: an occurrence can never fire twice.
    scheduled_for = models.DateTimeField(null=True, blank=True)
    job_attempt = models.SmallIntegerField(default=0, db_default=0, validators=NON_NEGATIVE)
    # The jobs layer has seen this job run end (history closed, retry or next start decided).
    job_settled = models.BooleanField(default=False, db_default=False)
    # Free text a caller correlates with (the order id for orders).
    correlation_id = models.CharField(max_length=100, blank=True, default="")
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # At most N at a time per key (issue 30, scheduler/holds.md): the key the workflow computed
    # from the input, scoped by the owner; NULL: no limit. `admitted_at`: when the run took a
    # slot (NULL while it waits, its first step Waiting). A slot is held by an unfinished run
    # that was admitted - derived from the run's state, so no path that ends a run can leak it.
    concurrency_key = models.CharField(  # noqa: DJ001
        max_length=200,
        null=True,
        blank=True,
        help_text="Runs of one owner with this key run at most concurrency_limit at a time (FIFO).",
    )
    concurrency_limit = models.SmallIntegerField(null=True, blank=True)
    admitted_at = models.DateTimeField(
        null=True, blank=True, help_text="When the run took a slot of its concurrency key (empty: waiting)."
    )

    class Meta:
        constraints = [
            # A known state, a non-negative attempt (sas_run_row_valid).
            models.CheckConstraint(
                condition=row_check("sas_run_row_valid", "state", "job_attempt"), name="run_row_valid"
            ),
            # Exactly once per occurrence: a second firing of (job, time, attempt) is refused.
            models.UniqueConstraint(
                fields=["job", "scheduled_for", "job_attempt", "owner_key"],
                condition=Q(job__isnull=False),
                name="run_job_occurrence_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["owner", "-created_at"], name="run_owner_created_idx"),
            models.Index(fields=["state", "-created_at"], name="run_state_created_idx"),
            # Admin search and API lookups by correlation id (order id, `job:<id>`) are exact.
            models.Index(fields=["correlation_id"], name="run_correlation_idx"),
            # A job's runs newest first: its last run (the reports' jobs table reads one row
            # per job through it) and its run history. The id, the pages' tie-breaker, makes
            # the index the pages' whole order (no sort of the job's runs) and lets a page find
            # its rows' ids from the index alone (scheduler/paging.py).
            models.Index(
                "job",
                models.F("created_at").desc(),
                models.F("id").desc(),
                name="run_job_created_idx",
                condition=Q(job__isnull=False),
            ),
            # "Does this job have a run still going?" - read only the unfinished runs of jobs.
            models.Index(
                fields=["job"],
                name="run_job_unfinished_idx",
                condition=Q(job__isnull=False) & Q(state__in=RUN_UNFINISHED_STATES),
            ),
            # An owner's runs in flight (Pending, Running): the runs-in-flight quota counts them
            # at every submit (scheduler/limits.py), reading only these rows, never the history.
            models.Index(
                fields=["owner"],
                name="run_owner_in_flight_idx",
                condition=Q(state__in=["pending", "running"]),
            ),
            # Job runs that ended and that the jobs layer has not settled yet (retry, buffered
            # start): the dispatcher's poll reads only these; runs of no job are never in it.
            models.Index(
                fields=["job"],
                name="run_job_unsettled_idx",
                condition=Q(job__isnull=False) & Q(job_settled=False) & Q(state__in=RUN_TERMINAL_STATES),
            ),
            # A key's unfinished runs, oldest first: its slots' holders and its queue (sas_key_admit).
            models.Index(
                Coalesce("owner", 0),
                "concurrency_key",
                "created_at",
                "id",
                name="run_key_unfinished_idx",
                condition=Q(concurrency_key__isnull=False) & Q(state__in=RUN_UNFINISHED_STATES),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow} {self.id} ({self.state})"

    @property
    def is_terminal(self) -> bool:
        return self.state in self.TERMINAL_STATES


def _pending_claim_index(*leading: str, name: str) -> models.Index:
    """A partial index of Pending steps in the fair claim's order - per owner, highest priority
    and earliest deadline first - after the `leading` columns (docs/operating/fairness.md)."""
    return models.Index(
        *leading,
        "owner_id",
        models.F("priority").desc(),
        models.F("deadline").asc(nulls_last=True),
        "not_before",
        "id",
        name=name,
        condition=Q(process_state="pending"),
    )


class StepState(models.TextChoices):
    # Not yet claimable: waits for the step before it (or, for a compensation, the one after).
    WAITING = "waiting", "Waiting"
    PENDING = "pending", "Pending"
    PROCESSING = "processing", "Processing"
    PROCESSED = "processed", "Processed"
    ERROR = "error", "Error"
    # A processed forward step whose compensation has been scheduled / has finished.
    COMPENSATING = "compensating", "Compensating"
    COMPENSATED = "compensated", "Compensated"
    # Never ran (or was stopped mid-flight) because the run was compensated or cancelled.
    CANCELLED = "cancelled", "Cancelled"


class StepKind(models.TextChoices):
    FORWARD = "forward", "Forward"
    COMPENSATION = "compensation", "Compensation"


class Step(models.Model):
    """The state record of one step of a run (forward work or its compensation)."""

    State = StepState

    Kind = StepKind

    # No index of its own: step_run_seq_unique (run_id, seq) serves lookups by run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps", db_index=False)
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.FORWARD)
    # Order inside the run: forward steps 0..n-1, compensations from 1000 upwards.
    seq = models.IntegerField(validators=NON_NEGATIVE)
    # Celery task name of the agent operation, e.g. "agents.payment.charge".
    operation = models.CharField(max_length=100)
    # One compensation per forward step (step_compensates_unique). Not a OneToOneField: its
    # unique index would hold an entry for every forward step's NULL too, and every step
    # transition (never a HOT update: process_state is in the partial indexes' predicates)
    # writes one into each index of the table. The partial unique index holds compensations only.
    compensates = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="+", db_index=False
    )

    process_state = models.CharField(max_length=20, choices=State.choices, default=State.PENDING)
    # The seed's LockedBy: null (not "") while nobody holds the step.
    locked_by = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    complete_by = models.DateTimeField(null=True, blank=True)
    failure_count = models.IntegerField(default=0, validators=NON_NEGATIVE)
    # From the database clock when the row is written (db_default), like every time on the
    # engine's path; later set by the transitions (backoff, deferral) on the same clock.
    not_before = models.DateTimeField(db_default=Now())
    lease = models.UUIDField(null=True, blank=True)
    # Unique with the owner (step_idempotency_key_unique, decision record 55); `<run>:<step>`,
    # so unique on its own anyway.
    idempotency_key = models.CharField(max_length=200)
    # Which key the step sends (issue 28): 1, the key it was submitted with; an operator's
    # resubmit after a definitive refusal (the remote said no: nothing happened) sends under the
    # next one, `<base key>:g<n>` (scheduler/keys.py, `step_key_renewable`). `idempotency_key`
    # always holds the key of the current generation: the agents read it from the row.
    # No CHECK of its own: adding one would scan the table at the migration (the column's fast
    # default alone does not); only the renewal statements write it, always upwards.
    key_generation = models.IntegerField(
        default=1,
        db_default=1,
        validators=NON_NEGATIVE,
        help_text="Idempotency key generation: 1 is the first key; each resubmit after a definitive "
        "refusal sends under the next one.",
    )
    # Time in the queue is not time at work (Temporal's schedule-to-start): a claimed step whose
    # agent has not started it by `start_by` is dispatched again, no failure counted. Null once
    # the supervisor has seen its agent start (the agent marks its start in Redis).
    start_by = models.DateTimeField(
        null=True,
        blank=True,
        help_text="An agent must start the current attempt by then, or it is sent again.",
    )
    # The whole step's deadline (Temporal's schedule-to-close), set at its first claim from
    # `schedule_to_close`: past it, no more attempts - the run compensates.
    close_by = models.DateTimeField(
        null=True, blank=True, help_text="The step stops trying at this time (its whole-step deadline)."
    )
    # Some attempt may have reached the remote service (it answered, or a call was sent and
    # timed out): only such a step is compensated. A step every attempt of which was refused
    # before anything was sent (open breaker, connection refused) had no effect.
    reached = models.BooleanField(
        default=False, db_default=False, help_text="Some attempt may have reached the remote service."
    )

    # Step policy, copied from the workflow definition at submit so an edited definition does
    # not change runs already in flight.
    timeout = models.DurationField(default=timedelta(seconds=30))
    queue_timeout = models.DurationField(
        default=timedelta(seconds=10),
        db_default=timedelta(seconds=10),
        help_text="How long a dispatched attempt may wait for an agent to start it.",
    )
    schedule_to_close = models.DurationField(
        null=True,
        blank=True,
        help_text="The whole step's time budget from its first claim (none: unbounded).",
    )
    max_failures = models.IntegerField(default=3, validators=NON_NEGATIVE)
    # A heartbeat step: each heartbeat of its agent moves complete_by to now + this window
    # (the `step_heartbeat` transition). Null: the step does not heartbeat.
    heartbeat_window = models.DurationField(
        null=True, blank=True, help_text="Each heartbeat extends complete-by to now + this window."
    )
    backoff_base = models.FloatField(default=1.0)
    backoff_max = models.FloatField(default=60.0)

    priority = models.SmallIntegerField(default=0)
    deadline = models.DateTimeField(null=True, blank=True)
    # The run's owner, copied onto each step at submit (0: a run nobody owns) so the claim can
    # share slots fairly between owners by an index alone (issue 18; docs/operating/fairness.md). Not a
    # foreign key: the claim reads it on every step, and nothing joins through it.
    owner_id = models.BigIntegerField(
        default=0, db_default=0, help_text="The run's owner (copied from the run; 0: nobody's)."
    )
    # Schedule-to-start (issue 18): a job occurrence's first step that has not been claimed by
    # then is skipped (`run_skip_unstarted`, the supervisor's sweep). Null: never (orders,
    # every step after the first, compensations).
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Its run is skipped if this (first) step has not started by then (backlog).",
    )

    attempts = models.IntegerField(default=0, validators=NON_NEGATIVE)
    # Request body for the agent, built from the run input and earlier results when the step
    # becomes Pending (so a claim needs no extra reads).
    payload = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    # The remote said no (declined card): its effect did not happen, so nothing to compensate.
    error_permanent = models.BooleanField(default=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run_id", "seq"]
        constraints = [
            # sas_step_row_valid: a known state and kind; a claimed (Processing) step always
            # carries its fence, its deadline and its owner, and an unclaimed (Pending) one is
            # owned by nobody; no negative position or count.
            models.CheckConstraint(
                condition=row_check(
                    "sas_step_row_valid",
                    "process_state",
                    "kind",
                    "lease",
                    "complete_by",
                    "locked_by",
                    "seq",
                    "failure_count",
                    "max_failures",
                    "attempts",
                ),
                name="step_row_valid",
            ),
            # The tenant keys hold the owner (decision record 55), last: the indexes still serve
            # lookups by run, by compensated step and by key. In the database the primary key is
            # (id, owner_id), with a UNIQUE (id) for the foreign keys to a step.
            models.UniqueConstraint(fields=["run", "seq", "owner_id"], name="step_run_seq_unique"),
            models.UniqueConstraint(
                fields=["idempotency_key", "owner_id"], name="step_idempotency_key_unique"
            ),
            models.UniqueConstraint(
                fields=["compensates", "owner_id"],
                condition=Q(compensates__isnull=False),
                name="step_compensates_unique",
            ),
        ]
        indexes = [
            # The scheduler's claim: only Pending rows, per owner in claim order - the fair
            # claim (sas_step_pick) walks the owners that have Pending rows (a loose index
            # scan) and takes each one's head in claim order (docs/operating/fairness.md).
            _pending_claim_index(name="step_pending_owner_idx"),
            # A reply's claim of one more step of its own operation (the slot it freed): the
            # same, within one operation, so a backlog of another operation's Pending rows is
            # never walked through (bench/saturation.py).
            _pending_claim_index("operation", name="step_pending_op_owner_idx"),
            # Schedule-to-start: unstarted first steps of job occurrences, by when they expire
            # (only rows with a deadline: orders' steps never enter it).
            models.Index(
                "expires_at",
                name="step_pending_expiry_idx",
                condition=Q(process_state="pending", attempts=0, expires_at__isnull=False),
            ),
            # The supervisor's sweep: only Processing rows, by the first deadline they have -
            # the start-by while no agent has been seen starting them, then the complete-by.
            models.Index(
                Coalesce("start_by", "complete_by"),
                name="step_processing_deadline_idx",
                condition=Q(process_state="processing"),
            ),
            # The "step in Error" alert rule: Error steps of a recent window (issue 21). Few
            # rows: a step is in Error only once, at the end.
            models.Index(
                fields=["finished_at"], name="step_error_finished_idx", condition=Q(process_state="error")
            ),
            # "Did this run undo anything?" (scheduler/outcomes.py `run_undone`, asked for every
            # run a job page, the runs API and the job list show): only compensation steps that
            # reached Processed, a few rows however large the table grows. Without it the planner
            # hashed a scan of the whole step table for each such query (bench/outputs.py).
            models.Index(
                fields=["run"],
                name="step_undone_run_idx",
                condition=Q(kind="compensation", process_state="processed"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} [{self.process_state}] of run {self.run_id}"

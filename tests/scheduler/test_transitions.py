"""The engine's transitions (scheduler/transitions/, scheduler/sql/) on the real PostgreSQL."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction

from jobs.presenters import OPERATOR_ACTIONS
from sastools.plans import uses_index
from scheduler import transitions
from scheduler.dispatcher import transitions as job_transitions
from scheduler.models import (
    HeartbeatState,
    HistoryStatus,
    Run,
    RunEvent,
    RunState,
    ScheduledJobKind,
    Step,
    StepKind,
    StepState,
    TaskExecutionHistory,
)
from scheduler.services import run_submit, step_claim_due, step_reply
from scheduler.transitions import AttemptOutcome
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

SQL_TEXT = (
    transitions.FUNCTIONS_FILE.read_text()
    + transitions.QUERIES_FILE.read_text()
    + job_transitions.JOBS_SQL.read_text()
)


def submit(user, **kwargs):
    return run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False, **kwargs)


def claim_first(run):
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


# ---------------------------------------------------------------------------------------------
# Every literal in the SQL is one the models know (Procrastinate's test_enum_synced)
# ---------------------------------------------------------------------------------------------

# Column -> the choices its literals must come from.
COLUMN_CHOICES = {
    "process_state": set(StepState.values),
    "state": set(RunState.values),
    # History rows and heartbeat steps' HeartbeatStatus rows (HeartbeatStatus.status).
    "status": set(HistoryStatus.values) | set(HeartbeatState.values),
}
KIND_CHOICES = set(StepKind.values) | set(TaskExecutionHistory.Kind.values) | set(ScheduledJobKind.values)
EVERY_CHOICE = (
    set(StepState.values)
    | set(RunState.values)
    | set(HistoryStatus.values)
    | KIND_CHOICES
    | set(RunEvent.Type.values)
    | set(HeartbeatState.values)
)
# Literals that are not states: JSON keys of what the functions return, and formats.
NOT_STATES = {
    "accepted", "after", "attempt", "backoff_seconds", "cause", "claimed_at", "claims", "complete_by",
    "correlation_id", "created_at", "current_lease", "current_state", "data", "delay", "error", "errored",
    "event_id", "event_ids", "events", "failed_lease", "failure_count", "id", "idempotency_key", "kind",
    "lease", "max_failures", "name", "needs_payload", "operation", "outcome", "payload", "reply_lease",
    "result", "retried", "run_id", "step", "step_id", "type", "success", "alerting", "claim_events",
    "counted", "deadline", "failures", "give_up", "marked_done_by", "mark_done", "reason", "refused",
    "start_by", "timeout", "operator", "action", "workflow",
    "continue", "heartbeat", "extended", "close_by",
    # PostgreSQL settings a page's transaction sets (set_config in checkpoint_page_begin)
    "statement_timeout", "idle_in_transaction_session_timeout",
    # sas_step_succeed's commit without waiting for the flush, and sas.durable_steps' values
    "synchronous_commit", "off", "on", "true",
    # encode()'s format in sas_uuid7(); the hex prefix sas_lease_time() reads a lease's time with
    "hex", "x",
    # keys of a job's operator history rows (jobs.sql: job_pause, job_resume, job_edit_record)
    "note", "changed",
    # keys of sas_run_skip_unstarted's answer and of a skipped occurrence's history detail
    "examined", "job_id", "start_reason",
    # keys of the claims' bulkhead limits (scheduler/bulkheads.py)
    "slots", "default",
    # the reason of a dependent's queued row (jobs.sql: a parent's outcome fired it)
    "dependency",
}  # fmt: skip
# ...and their reasons: each one the job pages put in words.
NOT_STATES |= set(OPERATOR_ACTIONS)


def _column_literals(column: str) -> list[str]:
    """Literals compared with or assigned to `column`: = 'x', <> 'x', IN ('x', 'y')."""
    found = re.findall(rf"\b{column}\s*(?:=|<>)\s*'(\w+)'", SQL_TEXT)
    for group in re.findall(rf"\b{column}\s+IN\s*\(([^)]*)\)", SQL_TEXT):
        found += re.findall(r"'(\w+)'", group)
    return found


@pytest.mark.parametrize("column", sorted(COLUMN_CHOICES))
def test_sql_literals__compared_with_a_state_column__are_its_model_choices(column):
    literals = _column_literals(column)

    assert literals, f"no literal found for {column}: the pattern is stale"
    assert set(literals) <= COLUMN_CHOICES[column], set(literals) - COLUMN_CHOICES[column]


def test_sql_literals__kind_columns__are_model_choices():
    literals = _column_literals("kind")

    assert literals and set(literals) <= KIND_CHOICES, set(literals) - KIND_CHOICES


def test_sql_literals__every_word_literal__is_a_choice_or_a_known_key():
    literals = set(re.findall(r"'([a-z_]+)'", SQL_TEXT))

    unknown = literals - EVERY_CHOICE - NOT_STATES
    assert not unknown, f"literals in scheduler/sql/ that no model choice knows: {sorted(unknown)}"


def test_sql_literals__a_misspelt_state__would_be_caught():
    # The check above cannot pass vacuously: a typo'd state is outside every set.
    assert "procesing" not in EVERY_CHOICE | NOT_STATES
    assert "processing" in COLUMN_CHOICES["process_state"]


def _row_valid(function: str, *args) -> bool | None:
    placeholders = ", ".join(["%s"] * len(args))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}({placeholders})", list(args))
        return cursor.fetchone()[0]


def _step_row(
    state: str, *, kind: str = "forward", leased: bool = False, locked_by: str | None = None, count=0
):
    now = datetime.now(UTC)
    lease = "0190b1c2-0000-7000-8000-000000000001" if leased else None
    return _row_valid(
        "sas_step_row_valid",
        state,
        kind,
        lease,
        now if leased else None,
        locked_by,
        count,
        count,
        count,
        count,
    )


# The row checks (one CHECK constraint per table, a function of the row) know exactly the models'
# choices: every one passes, and nothing else does.
def test_row_checks__every_model_choice__passes_and_nothing_else():
    for state in StepState.values:
        leased = state == StepState.PROCESSING
        assert _step_row(state, leased=leased, locked_by="w" if leased else None), state
    for kind in StepKind.values:
        assert _step_row("waiting", kind=kind), kind
    for state in RunState.values:
        assert _row_valid("sas_run_row_valid", state, 0), state
    for status in HistoryStatus.values:
        assert _row_valid("sas_history_row_valid", status, 0), status

    assert not _step_row("procesing")
    assert not _step_row("waiting", kind="sideways")
    assert not _row_valid("sas_run_row_valid", "done", 0)
    assert not _row_valid("sas_history_row_valid", "finished", 0)


def test_row_checks__step_invariants__refused():
    assert not _step_row("processing", leased=False, locked_by="w")  # no fence, no deadline
    assert not _step_row("processing", leased=True, locked_by=None)  # nobody holds it
    assert not _step_row("pending", locked_by="w")  # unclaimed yet owned
    assert not _step_row("pending", count=-1)
    assert not _row_valid("sas_run_row_valid", "pending", -1)
    assert not _row_valid("sas_history_row_valid", "started", -1)


def test_row_checks__are_the_tables_only_check_constraints():
    # A new CHECK constraint on these tables is rebuilt on every statement that writes them:
    # it belongs in the row check function instead (scheduler/sql/functions.sql says why).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, convalidated FROM pg_constraint WHERE contype = 'c'"
            " AND conrelid::regclass::text = ANY(%s)",
            [["scheduler_step", "scheduler_run", "scheduler_taskexecutionhistory"]],
        )
        checks = sorted(cursor.fetchall())
    assert checks == [  # and validated: migration 0018 adds them NOT VALID, then validates
        ("scheduler_run", "run_row_valid", True),
        ("scheduler_step", "step_row_valid", True),
        ("scheduler_taskexecutionhistory", "history_row_valid", True),
    ]


def test_row_checks__a_bad_row__is_refused_through_the_orm(user):
    from django.db import IntegrityError

    run = submit(user)
    with pytest.raises(IntegrityError, match="step_row_valid"), transaction.atomic():
        Step.objects.filter(run=run, seq=0).update(locked_by="someone")  # Pending, yet owned
    with pytest.raises(IntegrityError, match="run_row_valid"), transaction.atomic():
        Run.objects.filter(pk=run.id).update(state="done")
    with pytest.raises(IntegrityError, match="history_row_valid"), transaction.atomic():
        TaskExecutionHistory.objects.create(run=run, status="finished", started_at=datetime.now(UTC))
    step = Step.objects.get(run=run, seq=0)
    assert (step.process_state, step.locked_by) == ("pending", None)


def test_queries__every_named_statement_is_loaded_once():
    names = transitions.engine_queries()

    assert transitions.engine_queries() is names
    expected = {
        "step_claim", "step_claim_if_room", "step_claim_due", "step_succeed", "step_fail",
        "step_due_for_supervision",
        "reply_ignored", "step_mark_started", "step_mark_done",
        "step_fail_permanent", "step_advance", "run_compensate", "step_cancel_unstarted", "step_stop",
        "step_mark_compensating", "run_finish_compensation", "run_fail", "run_resume_compensation",
        "step_resume", "step_continue", "step_heartbeat", "checkpoint_page_begin", "checkpoint_advance",
        "heartbeat_complete", "runs_insert_many", "runs_cancel_unstarted", "run_skip_unstarted",
        "step_resubmit", "step_resubmit_in_place", "step_compensation_retry", "step_request_held",
        "runs_key_hold", "pauses_hold", "occurrences_hold", "pause_release", "holds_reconcile",
        "step_first_delay",
    }  # fmt: skip
    assert set(names) == expected
    assert all("{" not in text.replace("'{}'", "") for text in names.values())  # no .format holes


# ---------------------------------------------------------------------------------------------
# The real statements use their indexes (auto_explain logs the statements inside the functions)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def plans() -> Iterator[list[str]]:
    """Plans of every statement run from here on, nested ones included (auto_explain)."""
    collected: list[str] = []
    raw = connection.connection
    assert raw is not None

    def on_notice(diag) -> None:
        if diag.message_primary and "plan:" in diag.message_primary:
            collected.append(diag.message_primary)

    with connection.cursor() as cursor:
        cursor.execute("LOAD 'auto_explain'")
        cursor.execute("SET LOCAL auto_explain.log_min_duration = 0")
        cursor.execute("SET LOCAL auto_explain.log_nested_statements = on")
        cursor.execute("SET LOCAL auto_explain.log_level = 'notice'")
        cursor.execute("SET LOCAL enable_seqscan = off")
    raw.add_notice_handler(on_notice)
    yield collected
    raw.remove_notice_handler(on_notice)
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL auto_explain.log_min_duration = -1")


def _plan_of(plans: list[str], marker: str) -> str:
    matching = [p for p in plans if marker in p]
    assert matching, f"no statement containing {marker!r} among {len(plans)} plans"
    return "\n".join(matching)


def _reads_a_pending_owner_index(plan: str) -> bool:
    """The plan reads one of the two partial indexes of Pending steps keyed by owner: on a near
    empty table the planner costs both alike and takes either, by the statistics the tests
    before left (step_pending_op_owner_idx leads with the operation; with no operation asked
    for it is still read by owner within each operation)."""
    return "step_pending_owner_idx" in plan or "step_pending_op_owner_idx" in plan


def test_claim_due__reads_the_pending_partial_index(user, plans):
    for _ in range(3):
        submit(user)
    plans.clear()

    transitions.step_claim_many(instance="t", limit=2)

    # One owner: its head, read from the owner's part of the pending index.
    plan = _plan_of(plans, "FOR UPDATE SKIP LOCKED")
    assert _reads_a_pending_owner_index(plan), plan


def test_due_for_supervision__reads_the_processing_partial_index(user, plans):
    run = submit(user)
    claim_first(run)
    plans.clear()

    transitions.step_due_for_supervision(batch=10)

    plan = _plan_of(plans, "coalesce(start_by, complete_by) < statement_timestamp()")
    assert "step_processing_deadline_idx" in plan, plan


def test_succeed__finds_next_step_and_attempt_by_index(user, plans):
    run = submit(user)
    claim = claim_first(run)
    plans.clear()

    transitions.step_succeed(
        step_id=claim.step_id, lease=claim.lease, result={}, instance="t", claim_next=True, observed_ok=True
    )

    # The next step is found by the run's index: (run_id, seq) or the run_id foreign key's -
    # on a table this small their costs tie and the planner may take either; never a scan.
    next_step = _plan_of(plans, "seq > s.seq")
    assert "step_run_seq_unique" in next_step or "Index Scan using scheduler_step_run_id" in next_step, plans
    # The history is partitioned by day (issue 29): each partition's lease index is probed.
    assert uses_index(_plan_of(plans, "SET status = 'succeeded'"), "history_lease_idx"), plans
    assert "step_pending_op_owner_idx" in _plan_of(plans, "operation = p_operation"), plans


def test_claim__only_a_runs_first_claim__starts_it(user, plans):
    run = submit(user)
    claim = claim_first(run)  # the first step's first attempt: the run starts

    assert Run.objects.get(pk=run.id).state == "running"
    assert any("scheduler_run" in p and "'running'" in p for p in plans), "the run start ran no statement"
    plans.clear()

    # A running run's next step: its claim statement names neither the run nor the event table.
    transitions.step_succeed(
        step_id=claim.step_id, lease=claim.lease, result={}, instance="t", claim_next=True, observed_ok=True
    )
    claim_plans = [p for p in plans if "process_state = 'processing'" in p and "lease = sas_uuid7()" in p]
    assert claim_plans, plans
    assert not any("scheduler_run" in p or "scheduler_runevent" in p for p in claim_plans), claim_plans
    assert not any("SET state = 'running'" in p for p in plans), plans

    # A retried first step (attempts 2) does not start the run again.
    second = submit(user)
    first = claim_first(second)
    transitions.step_fail(
        attempts=[AttemptOutcome(step_id=first.step_id, lease=first.lease, error="x")],
        cause=TaskExecutionHistory.Status.FAILED_TRANSIENT,
        actor="t",
        history_kind=TaskExecutionHistory.Kind.SCHEDULER,
        min_backoff=0.0,
    )
    Step.objects.filter(pk=first.step_id).update(not_before=datetime.now(UTC) - timedelta(seconds=1))
    again = claim_first(second)
    assert again.step_id == first.step_id and again.attempt == 2
    events = list(second.events.values_list("type", flat=True))
    assert events.count("started") == 1, events
    assert list(run.events.values_list("type", flat=True)).count("started") == 1


# ---------------------------------------------------------------------------------------------
# Guards: a transition from the wrong state changes nothing
# ---------------------------------------------------------------------------------------------


def test_run_transitions__wrong_state__refused(user):
    run = submit(user)  # Pending

    assert transitions.run_fail(run_id=run.id, reason="x") is False
    assert transitions.run_reopen_compensation(run_id=run.id) is False
    assert transitions.run_end_compensation(run_id=run.id) is None
    assert transitions.run_mark_compensating(run_id=run.id, reason="r", cancel=False) is False
    assert transitions.run_mark_compensating(run_id=run.id, reason="again", cancel=False) is None
    assert Run.objects.get(pk=run.id).error == "r"


@pytest.mark.parametrize("claim_next", [True, False])
def test_succeed__next_step_waiting__claimed_with_claim_next_else_pending(user, claim_next):
    run = submit(user)
    claim = claim_first(run)

    done = transitions.step_succeed(
        step_id=claim.step_id,
        lease=claim.lease,
        result={},
        instance="t",
        claim_next=claim_next,
        observed_ok=True,
    )

    step = run.steps.get(seq=1)
    assert step.not_before <= step.updated_at  # due from the moment it advanced
    started = TaskExecutionHistory.objects.filter(step=step, kind="attempt", status="started")
    if claim_next:
        (next_claim,) = [c for c in done.claims if c.step_id == step.pk]
        assert step.process_state == "processing" and step.attempts == 1
        assert str(step.lease) == next_claim.lease and step.locked_by == "t"
        assert list(started.values_list("lease", flat=True)) == [step.lease]
    else:
        assert done.claims == []
        assert step.process_state == "pending" and step.attempts == 0 and step.lease is None
        assert not started.exists()


def test_step_first_delay__only_a_new_runs_pending_first_step_and_only_later(user):
    later = datetime.now(UTC) + timedelta(minutes=5)
    run = submit(user, not_before=later)
    first = run.steps.get(seq=0)
    assert (first.process_state, first.not_before) == ("pending", later)
    assert transitions.step_first_delay(step_id=first.pk, at=later - timedelta(minutes=1)) is False  # earlier
    assert step_claim_due(instance="test", limit=5, run_id=run.id) == []  # not due

    other = submit(user)
    claim = claim_first(other)
    assert transitions.step_first_delay(step_id=claim.step_id, at=later) is False  # processing
    assert transitions.step_first_delay(step_id=other.steps.get(seq=1).pk, at=later) is False  # waiting


def test_step_transitions__wrong_state_or_lease__refused(user):
    run = submit(user)
    waiting = run.steps.get(seq=1)
    claim = claim_first(run)
    stale = "00000000-0000-0000-0000-000000000000"

    assert transitions.step_fail_permanent(step_id=claim.step_id, lease=stale, error="no") is None
    assert transitions.step_advance(step_id=claim.step_id, payload={}) is False  # processing, not waiting
    assert transitions.step_mark_compensating(step_ids=[waiting.pk]) == 0
    failed = transitions.step_fail(
        attempts=[AttemptOutcome(step_id=claim.step_id, lease=stale, error="e")],
        cause="failed_transient",
        actor="a",
        history_kind="scheduler",
    )
    assert failed.retried == [] and failed.errored == []
    refused = transitions.step_succeed(
        step_id=claim.step_id, lease=stale, result={}, instance="t", claim_next=False, observed_ok=True
    )
    assert refused.accepted is False
    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "processing" and str(step.lease) == claim.lease and step.failure_count == 0


def test_succeed__observed_run_outside_a_transaction__refused_whole(user, settings):
    run = submit(user, observed=True)
    claim = claim_first(run)

    with pytest.raises(transitions.RunObserved), transaction.atomic():
        transitions.step_succeed(
            step_id=claim.step_id,
            lease=claim.lease,
            result={},
            instance="t",
            claim_next=False,
            observed_ok=False,
        )

    assert Step.objects.get(pk=claim.step_id).process_state == "processing"


def test_reply__observed_run__events_announced_to_receivers(user):
    from scheduler.signals import run_event

    seen: list[str] = []

    def receiver(sender, event, **kwargs):
        seen.append(f"{event.run_id}:{event.type}")

    quiet, watched = submit(user), submit(user, observed=True)
    run_event.connect(receiver, dispatch_uid="test-receiver")
    try:
        for run in (quiet, watched):
            claim = claim_first(run)
            assert step_reply(
                step_id=claim.step_id, lease=claim.lease, outcome="success", claim_next=False
            ) == ("accepted")
    finally:
        run_event.disconnect(dispatch_uid="test-receiver")

    assert seen == [f"{watched.id}:started", f"{watched.id}:step_completed"]
    # Every run's events are stored, announced or not.
    assert list(quiet.events.values_list("type", flat=True)) == ["received", "started", "step_completed"]


# ---------------------------------------------------------------------------------------------
# The one retry transition: backoff grows, stays under the cap, honours a minimum
# ---------------------------------------------------------------------------------------------


def _db_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


@pytest.mark.parametrize(
    ("failures_before", "low", "high"),
    [(0, 0.5, 1.0), (1, 1.0, 2.0), (2, 2.0, 4.0), (3, 4.0, 8.0), (6, 4.0, 8.0)],
)
def test_fail__backoff_is_exponential_with_equal_jitter_and_capped(user, failures_before, low, high):
    run = submit(user)
    Step.objects.filter(run=run, seq=0).update(
        backoff_base=1.0, backoff_max=8.0, max_failures=10, failure_count=failures_before
    )
    claim = claim_first(run)
    before = _db_now()

    failed = transitions.step_fail(
        attempts=[AttemptOutcome(step_id=claim.step_id, lease=claim.lease, error="503")],
        cause="failed_transient",
        actor="a",
        history_kind="scheduler",
    )

    (retried,) = failed.retried
    assert low <= retried.delay <= high
    step = Step.objects.get(pk=claim.step_id)
    assert timedelta(seconds=low) <= step.not_before - before <= timedelta(seconds=high + 1)
    assert step.failure_count == failures_before + 1 and step.process_state == "pending"


def test_fail__min_backoff__honoured(user):
    run = submit(user)
    claim = claim_first(run)

    failed = transitions.step_fail(
        attempts=[AttemptOutcome(step_id=claim.step_id, lease=claim.lease, error="circuit open")],
        cause="failed_transient",
        actor="a",
        history_kind="scheduler",
        min_backoff=5.0,
    )

    assert 5.0 <= failed.retried[0].delay <= 5.1


def test_fail__at_limit__error_kept_with_its_lease(user):
    run = submit(user)
    Step.objects.filter(run=run, seq=0).update(max_failures=1)
    claim = claim_first(run)

    failed = transitions.step_fail(
        attempts=[AttemptOutcome(step_id=claim.step_id, lease=claim.lease, error="503")],
        cause="failed_transient",
        actor="a",
        history_kind="scheduler",
    )

    assert failed.retried == [] and [s.step_id for s in failed.errored] == [claim.step_id]
    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "error" and str(step.lease) == claim.lease and step.finished_at is not None
    assert step.complete_by < datetime(2100, 1, 1, tzinfo=UTC)


def test_claim_due__several_owners__fair_pick_reads_the_pending_owner_index(user, django_user_model, plans):
    other = django_user_model.objects.create(username="other-owner")
    for owner in (user, user, other):
        submit(owner)
    claim_first(Run.objects.filter(owner=user).first())  # an owner with one in flight
    plans.clear()

    transitions.step_claim_many(instance="t", limit=2)

    # The owners are found by a loose scan of the owner index, each owner's heads read from it;
    # the in-flight counts read the partial index of Processing rows, once, into a map each head
    # looks its count up in; the heads picked are locked one by one by primary key. No statement
    # joins two sets: a join's plan rests on statistics, which a burst leaves stale.
    owners = _plan_of(plans, "WITH RECURSIVE")
    assert _reads_a_pending_owner_index(owners), owners
    busy = _plan_of(plans, "GROUP BY owner_id, operation")
    assert "step_processing_deadline_idx" in busy, busy
    heads = _plan_of(plans, "row_number() OVER")
    assert _reads_a_pending_owner_index(heads), heads
    assert "scheduler_step_pkey" not in heads and "scheduler_step_id_key" not in heads, heads
    assert "Aggregate" not in heads.replace("WindowAgg", ""), heads
    lock = _plan_of(plans, "FOR UPDATE SKIP LOCKED")
    # By id: the primary key (id, owner_id) or UNIQUE (id) (decision record 55), both lead by id.
    assert re.search(r"Index Scan using scheduler_step_(pkey|id_key)\b", lock), lock
    assert "Seq Scan" not in owners + busy + heads + lock, lock


def test_reply_one_more__several_owners__reads_the_operation_owner_index(user, django_user_model, plans):
    other = django_user_model.objects.create(username="other-owner")
    run = submit(user)
    submit(user)
    submit(other)
    claim = claim_first(run)
    plans.clear()

    transitions.step_succeed(
        step_id=claim.step_id, lease=claim.lease, result={}, instance="t", claim_next=True, observed_ok=True
    )

    pick = _plan_of(plans, "row_number() OVER")
    assert "step_pending_op_owner_idx" in pick, pick
    assert "step_pending_op_owner_idx" in _plan_of(plans, "WITH RECURSIVE"), plans

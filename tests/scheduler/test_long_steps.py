"""Long steps on the real PostgreSQL, the test playing scheduler and agent: a paginated step's
checkpoint and `continue`, a heartbeat step's heartbeats and their fence."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import OperationalError, connection, transaction

from scheduler import transitions
from scheduler.models import Checkpoint, HeartbeatStatus, Step, TaskExecutionHistory
from scheduler.selectors import run_progress
from scheduler.services import (
    LeaseLost,
    page_begin,
    page_commit,
    run_submit,
    step_claim_due,
    step_heartbeat,
    step_reply,
)
from scheduler.workflows import StepDef, Workflow, WorkflowInputError, get_workflow, register

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

PAGED = "engine_test_paged"
LONG = "engine_test_heartbeat"
STALE = "00000000-0000-0000-0000-000000000000"


@pytest.fixture(autouse=True)
def _long_workflows():
    for name, step in (
        (PAGED, StepDef(name="pages", operation="agents.enginetest.pages", page_size=10, timeout=30)),
        (LONG, StepDef(name="long", operation="agents.enginetest.long", heartbeat=5, timeout=5)),
    ):
        try:
            get_workflow(name)
        except WorkflowInputError:
            register(Workflow(name=name, steps=[step]))


def _db_now():
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def _claim(run):
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


def _submit(user, workflow):
    return run_submit(workflow=workflow, input={}, owner_id=user.id, kick=False)


def test_step_def__paginated_and_heartbeat__refused_together():
    with pytest.raises(ValueError, match="not both"):
        StepDef(name="x", operation="agents.x.y", page_size=10, heartbeat=5)


def test_submit__paginated_step__has_its_checkpoint_and_heartbeat_step_its_status(user):
    paged, long = _submit(user, PAGED), _submit(user, LONG)

    checkpoint = Checkpoint.objects.get(run=paged)
    status = HeartbeatStatus.objects.get(run=long)
    assert (checkpoint.page_size, checkpoint.page_start, checkpoint.completed) == (10, 0, False)
    assert status.status == "waiting" and status.heartbeats == 0
    assert Step.objects.get(run=long).heartbeat_window == timedelta(seconds=5)
    assert Step.objects.get(run=paged).heartbeat_window is None


def test_continue__page_done__claimed_again_at_once_no_failure_counted(user):
    run = _submit(user, PAGED)
    first = _claim(run)
    Step.objects.filter(pk=first.step_id).update(failure_count=2)
    with transaction.atomic():
        checkpoint = page_begin(step_id=first.step_id, lease=first.lease)
        page_commit(
            step_id=first.step_id, lease=first.lease, checkpoint=checkpoint, next_start=10, rows=10,
            total=25, last=False,
        )  # fmt: skip

    done = transitions.step_continue(step_id=first.step_id, lease=first.lease, instance="t", claim=True)

    (second,) = done.claims
    assert second.step_id == first.step_id and second.lease != first.lease and second.attempt == 2
    step = Step.objects.get(pk=first.step_id)
    assert step.process_state == "processing" and step.failure_count == 0 and step.reached
    statuses = list(
        TaskExecutionHistory.objects.filter(step=step, kind="attempt")
        .order_by("id")
        .values_list("status", flat=True)
    )
    assert statuses == ["continued", "started"]
    row = Checkpoint.objects.get(step=step)
    assert (row.page_start, row.pages_done, row.rows_done, row.total) == (
        10,
        1,
        10,
        25,
    )
    progress = run_progress(user=user, run_id=run.id)
    assert progress["paged"]["pages_done"] == 1 and progress["paged"]["pages_total"] == 3
    assert progress["paged"]["percent"] == 40.0


def test_continue__stale_lease__ignored_and_recorded(user):
    run = _submit(user, PAGED)
    claim = _claim(run)

    assert step_reply(step_id=claim.step_id, lease=STALE, outcome="continue") == "ignored"

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "processing" and str(step.lease) == claim.lease
    ignored = TaskExecutionHistory.objects.get(step=step, kind="late_reply")
    assert ignored.status == "ignored" and ignored.detail["outcome"] == "continue"


def test_page__stale_lease__applies_nothing(user):
    run = _submit(user, PAGED)
    claim = _claim(run)

    with pytest.raises(LeaseLost), transaction.atomic():
        page_begin(step_id=claim.step_id, lease=STALE)

    assert Checkpoint.objects.get(run=run).started_at is None


def test_page__checkpoint_moved_meanwhile__commit_refused(user):
    """Compare-and-set: a page begun at 0 cannot commit once the checkpoint is past 0 (a page
    is applied once), and the caller's transaction rolls back."""
    run = _submit(user, PAGED)
    claim = _claim(run)
    with transaction.atomic():
        stale_view = page_begin(step_id=claim.step_id, lease=claim.lease)
        page_commit(
            step_id=claim.step_id, lease=claim.lease, checkpoint=stale_view, next_start=10, rows=10,
            total=None, last=False,
        )  # fmt: skip

    with pytest.raises(LeaseLost), transaction.atomic():
        page_commit(
            step_id=claim.step_id, lease=claim.lease, checkpoint=stale_view, next_start=10, rows=10,
            total=None, last=False,
        )  # fmt: skip

    checkpoint = Checkpoint.objects.get(run=run)
    assert (checkpoint.page_start, checkpoint.pages_done, checkpoint.rows_done) == (10, 1, 10)


def test_page__its_deadline_passed_before_commit__not_applied(user):
    """A page that runs past its attempt's complete_by is not applied, even by the lease that
    holds the step: the checkpoint does not move, its transaction rolls back (the supervisor
    then takes the step back like any expired attempt)."""
    run = _submit(user, PAGED)
    claim = _claim(run)

    def page_past_its_deadline():
        with transaction.atomic():
            checkpoint = page_begin(step_id=claim.step_id, lease=claim.lease)
            # Its time runs out while it works (the step's row is ours: locked by page_begin).
            Step.objects.filter(pk=claim.step_id).update(complete_by=_db_now() - timedelta(seconds=1))
            page_commit(
                step_id=claim.step_id, lease=claim.lease, checkpoint=checkpoint, next_start=10,
                rows=10, total=None, last=False,
            )  # fmt: skip

    with pytest.raises(LeaseLost, match="deadline passed"):
        page_past_its_deadline()

    row = Checkpoint.objects.get(run=run)
    assert (row.page_start, row.pages_done, row.rows_done, row.started_at) == (0, 0, 0, None)


def _timeouts():
    """This transaction's idle-in-transaction and statement timeouts, in milliseconds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setting::bigint FROM pg_settings"
            " WHERE name IN ('statement_timeout', 'idle_in_transaction_session_timeout') ORDER BY name"
        )
        return [row[0] for row in cursor.fetchall()]


def test_page__begin__the_database_ends_the_page_at_complete_by(user):
    """page_begin bounds the page's transaction by the attempt: statement and idle timeouts of
    the time left until complete_by, so a page stuck in a statement (or whose worker froze with
    its transaction open) cannot hold the step's row - and keep the supervisor off it - past
    its deadline."""
    run = _submit(user, PAGED)
    claim = _claim(run)
    Step.objects.filter(pk=claim.step_id).update(complete_by=_db_now() + timedelta(seconds=20))
    before = _timeouts()

    with transaction.atomic():
        page_begin(step_id=claim.step_id, lease=claim.lease)
        idle, statement = _timeouts()
    assert before == [0, 0]  # the session's: none
    assert 18_000 < idle == statement <= 20_000  # milliseconds

    def page_stuck_in_the_database():
        with transaction.atomic(), connection.cursor() as cursor:
            page_begin(step_id=claim.step_id, lease=claim.lease)
            cursor.execute("SELECT pg_sleep(30)")

    Step.objects.filter(pk=claim.step_id).update(complete_by=_db_now() + timedelta(seconds=0.3))
    with pytest.raises(OperationalError, match="statement timeout"):
        page_stuck_in_the_database()


def test_heartbeat__extends_complete_by_by_the_window(user):
    run = _submit(user, LONG)
    claim = _claim(run)
    Step.objects.filter(pk=claim.step_id).update(complete_by=_db_now() + timedelta(seconds=1))
    before = _db_now()

    beat = step_heartbeat(step_id=claim.step_id, lease=claim.lease, worker="w1")
    again = step_heartbeat(step_id=claim.step_id, lease=claim.lease, worker="w1")

    assert beat.extended and again.extended
    step = Step.objects.get(pk=claim.step_id)
    assert step.complete_by == again.complete_by
    assert timedelta(seconds=5) <= step.complete_by - before <= timedelta(seconds=6)
    assert step.start_by is None  # its agent evidently started
    status = HeartbeatStatus.objects.get(step=step)
    assert status.status == "in_progress" and status.heartbeats == 2 and str(status.lease) == claim.lease
    assert status.worker == "w1" and status.last_heartbeat_at >= before


def test_heartbeat__stale_lease__extends_nothing_and_is_recorded(user):
    run = _submit(user, LONG)
    claim = _claim(run)
    complete_by = Step.objects.get(pk=claim.step_id).complete_by

    beat = step_heartbeat(step_id=claim.step_id, lease=STALE, worker="frozen")

    assert not beat.extended
    step = Step.objects.get(pk=claim.step_id)
    assert step.complete_by == complete_by and str(step.lease) == claim.lease
    assert HeartbeatStatus.objects.get(step=step).status == "waiting"
    ignored = TaskExecutionHistory.objects.get(step=step, kind="late_reply")
    assert (ignored.status, ignored.worker, ignored.detail["outcome"]) == ("ignored", "frozen", "heartbeat")
    assert ignored.detail["reply_lease"] == STALE and ignored.detail["current_lease"] == claim.lease


def test_heartbeat__past_complete_by__lease_lost(user):
    """A worker resumed after its deadline: even with its own lease, nothing is extended (the
    supervisor is about to take the step back)."""
    run = _submit(user, LONG)
    claim = _claim(run)
    Step.objects.filter(pk=claim.step_id).update(complete_by=_db_now() - timedelta(seconds=1))

    assert not step_heartbeat(step_id=claim.step_id, lease=claim.lease, worker="w").extended


def test_heartbeat__a_step_without_a_window__refused(user):
    run = _submit(user, PAGED)
    claim = _claim(run)

    assert not step_heartbeat(step_id=claim.step_id, lease=claim.lease, worker="w").extended


def test_claim__heartbeat_step__carries_its_window_and_whole_deadline(user):
    run = _submit(user, LONG)

    claim = _claim(run)

    assert claim.heartbeat == 5.0 and claim.message()["heartbeat"] == 5.0
    paged = _claim(_submit(user, PAGED))
    assert paged.heartbeat == 0.0 and "heartbeat" not in paged.message()


def test_progress__another_users_run__not_found(user, django_user_model):
    run = _submit(user, PAGED)
    other = django_user_model.objects.create(username="mallory")

    assert run_progress(user=other, run_id=run.id) is None
    assert run_progress(user=user, run_id=run.id)["paged"]["percent"] == 0.0

"""The jobs dispatcher on the real database, one tick at a time: occurrences fire once, the
overlap policies, misfires with and without a catch-up window, retries, max firings, jitter,
pause/resume, run now and backfill. The test plays the agents (it ends runs itself)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.firing import jitter_offset
from scheduler.dispatcher.selectors import job_history
from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services import (
    JobStateError,
    job_backfill,
    job_pause,
    job_resume,
    job_run_now,
    jobs_dispatch_wake,
)

from .jobs_support import cancel, compensate, complete, dispatch, make_due, new_job, past_occurrence, runs_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

H = TaskExecutionHistory


def history(job: Job, status: str | None = None) -> list[H]:
    rows = H.objects.filter(job=job, kind=H.Kind.JOB).order_by("id")
    return list(rows.filter(status=status) if status else rows)


def next_row(job: Job) -> ScheduledJob | None:
    return ScheduledJob.objects.filter(job=job, kind=ScheduledJob.Kind.NEXT).first()


def test_create__recurring__next_row_is_the_first_occurrence_after_now(user):
    job = new_job(user, cron="*/5 * * * *")

    row = next_row(job)
    now = job_transitions.db_now()
    assert row is not None and now < row.scheduled_for <= now + timedelta(minutes=5)
    assert row.scheduled_for.minute % 5 == 0 and row.next_execution_at == row.scheduled_for


def test_dispatch__due_occurrence__one_run_for_it_and_the_row_moves_on(user):
    job = new_job(user, cron="0 * * * *", priority=-30)
    t = make_due(job)

    done = dispatch()

    (run,) = runs_of(job)
    assert done.started == 1 and run.scheduled_for == t and run.job_attempt == 0
    assert run.owner_id == user.id and run.priority == -30 and run.correlation_id == f"job:{job.id}"
    assert run.steps.get(seq=0).process_state == "pending"
    (started,) = history(job)
    assert started.status == "started" and started.run_id == run.id and started.retry_count == 0
    row = next_row(job)
    assert row is not None and row.scheduled_for == t + timedelta(hours=1)
    # Nothing is due any more: a second tick fires nothing.
    assert dispatch().started == 0 and len(runs_of(job)) == 1


def test_dispatch__one_off_job__fires_once_then_is_finished(user):
    job = new_job(user, cron="")

    dispatch()
    dispatch()

    assert len(runs_of(job)) == 1
    job.refresh_from_db()
    assert job.finished_at is not None and next_row(job) is None


def test_dispatch__one_off_in_the_future__not_yet(user):
    later = job_transitions.db_now() + timedelta(hours=1)
    job = new_job(user, cron="", run_at=later)

    dispatch()

    assert runs_of(job) == [] and next_row(job).scheduled_for == later


def test_overlap_skip__previous_run_going__skipped_with_a_history_row(user):
    job = new_job(user)
    first = job_run_now(by_staff=False, job_id=job.id)
    t = make_due(job)

    dispatch()

    assert [r.id for r in runs_of(job)] == [first.run_id]
    (skipped,) = history(job, "skipped")
    assert skipped.scheduled_for == t and "overlap (skip)" in skipped.detail["reason"]
    assert str(first.run_id) in skipped.detail["reason"]
    assert next_row(job).scheduled_for == t + timedelta(hours=1)


def test_overlap_buffer_one__starts_when_the_running_one_ends_and_buffers_only_one(user):
    job = new_job(user, overlap_policy="buffer_one")
    job_run_now(by_staff=False, job_id=job.id)
    (first,) = runs_of(job)
    buffered_t = make_due(job)
    dispatch()
    second_try = job_run_now(by_staff=False, job_id=job.id)

    assert runs_of(job) == [first]
    assert [h.scheduled_for for h in history(job, "buffered")] == [buffered_t]
    assert second_try.outcome == "skipped" and "already waits" in second_try.reason
    parked = ScheduledJob.objects.get(job=job, kind="queued")
    assert parked.next_execution_at is None and parked.scheduled_for == buffered_t

    complete(first)
    dispatch()  # settles the ended run, which makes the buffered one due, and starts it

    assert [r.scheduled_for for r in runs_of(job)] == [first.scheduled_for, buffered_t]
    assert not ScheduledJob.objects.filter(job=job, kind="queued").exists()
    assert H.objects.get(run=first, kind="job").status == "succeeded"


def test_overlap_allow_all__runs_overlap(user):
    job = new_job(user, overlap_policy="allow_all")
    job_run_now(by_staff=False, job_id=job.id)
    make_due(job)

    dispatch()

    runs = runs_of(job)
    assert len(runs) == 2 and all(r.state == "pending" for r in runs)


def test_overlap_cancel_other__running_one_cancelled_then_the_new_one_starts(user):
    job = new_job(user, overlap_policy="cancel_other")
    job_run_now(by_staff=False, job_id=job.id)
    (first,) = runs_of(job)
    t = make_due(job)

    # One tick: the firing cancels the running run and buffers the occurrence; the settle that
    # follows it settles the cancelled run, and the tick fires the buffered row it made due.
    result = dispatch()

    assert Run.objects.get(pk=first.pk).state == "cancelled"
    (waiting,) = history(job, "buffered")
    assert "cancel_other" in waiting.detail["reason"]
    assert result.settled == 1 and result.started == 1
    first_again, second = runs_of(job)
    assert first_again.pk == first.pk
    assert second.scheduled_for == t and second.state == "pending"
    assert H.objects.get(run=first, kind="job").status == "cancelled"


def test_not_idempotent__allow_all_refused_at_create(user):
    from scheduler.workflows import WorkflowInputError

    with pytest.raises(WorkflowInputError) as excinfo:
        new_job(user, idempotent=False, overlap_policy="allow_all")

    assert "overlap_policy" in excinfo.value.errors and not Job.objects.exists()


def test_misfire__no_catchup_window__fires_once_for_the_latest_and_records_the_rest(user):
    job = new_job(user)
    oldest = make_due(job, back=3)

    done = dispatch()

    (run,) = runs_of(job)
    assert done.started == 1 and run.scheduled_for == past_occurrence(job)
    (skipped,) = history(job, "skipped")
    assert skipped.detail["count"] == 3 and skipped.scheduled_for == oldest
    assert "misfire" in skipped.detail["reason"]
    assert next_row(job).scheduled_for > job_transitions.db_now()


def test_misfire__catchup_window__missed_ones_inside_fire_oldest_first_older_skipped(user):
    # Hourly; four occurrences missed; a 2-hour window holds exactly the latest two.
    job = new_job(user, catchup_window=timedelta(hours=2))
    make_due(job, back=3)
    inside = [past_occurrence(job, back=1), past_occurrence(job)]

    dispatch()

    runs = runs_of(job)
    assert [r.scheduled_for for r in runs] == inside[:1]  # the second waits for the first
    (skipped,) = history(job, "skipped")
    assert skipped.detail["count"] == 2 and "catch-up window" in skipped.detail["reason"]

    complete(runs[0])
    dispatch()

    assert [r.scheduled_for for r in runs_of(job)] == inside
    assert next_row(job).scheduled_for > job_transitions.db_now()


def test_retries__failed_attempts_retried_up_to_max_retry_each_one_history_row(user):
    job = new_job(user, max_retry=2, retry_backoff=0.001)
    t = make_due(job)
    dispatch()

    for attempt in range(3):
        (run,) = [r for r in runs_of(job) if r.job_attempt == attempt]
        assert run.scheduled_for == t
        compensate(run)
        dispatch()  # settle: a retry row (after its backoff) ...
        dispatch()  # ... which is due by the next tick

    runs = runs_of(job)
    assert [r.job_attempt for r in runs] == [0, 1, 2]
    rows = history(job)
    assert [(h.retry_count, h.status) for h in rows] == [
        (0, "compensated"),
        (1, "compensated"),
        (2, "compensated"),
    ]
    assert all(h.ended_at is not None and h.run_id for h in rows)
    assert not ScheduledJob.objects.filter(job=job, kind="retry").exists()


def test_retries__completed_or_cancelled__not_retried(user):
    job = new_job(user, max_retry=3, retry_backoff=0.001, overlap_policy="allow_all")
    make_due(job)
    dispatch()
    job_run_now(by_staff=False, job_id=job.id)
    first, second = runs_of(job)
    complete(first)
    cancel(second)

    dispatch()
    dispatch()

    assert len(runs_of(job)) == 2


def test_max_firings__after_the_limit_no_next_occurrence(user):
    # Three occurrences missed inside the catch-up window, but only two firings allowed.
    job = new_job(user, max_firings=2, overlap_policy="allow_all", catchup_window=timedelta(hours=4))
    make_due(job, back=2)

    dispatch()

    job.refresh_from_db()
    assert [r.scheduled_for for r in runs_of(job)] == [
        past_occurrence(job, back=2),
        past_occurrence(job, back=1),
    ]
    assert job.firing_count == 2 and next_row(job) is None and job.finished_at is not None


def test_end_at__no_occurrence_after_it(user):
    now = job_transitions.db_now()
    job = new_job(user, cron="*/5 * * * *", end_at=now + timedelta(minutes=5, seconds=1))
    row = next_row(job)
    ScheduledJob.objects.filter(pk=row.pk).update(next_execution_at=now - timedelta(seconds=1))

    dispatch()

    job.refresh_from_db()
    assert len(runs_of(job)) == 1 and next_row(job) is None and job.finished_at is not None


def test_start_at__first_occurrence_not_before_it(user):
    start = job_transitions.db_now() + timedelta(days=3)

    job = new_job(user, cron="0 * * * *", start_at=start)

    assert next_row(job).scheduled_for >= start


def test_jitter__due_time_spread_but_the_run_keeps_the_cron_time(user):
    job = new_job(user, jitter=600)
    row = next_row(job)

    offset = row.next_execution_at - row.scheduled_for
    assert offset == jitter_offset(job.id, row.scheduled_for, 600)
    assert timedelta(0) <= offset <= timedelta(seconds=600)
    assert len({jitter_offset(job.id, row.scheduled_for + timedelta(hours=h), 600) for h in range(10)}) > 1
    t = make_due(job)
    dispatch()
    assert [r.scheduled_for for r in runs_of(job)] == [t]
    moved = next_row(job)
    assert moved.next_execution_at == moved.scheduled_for + jitter_offset(job.id, moved.scheduled_for, 600)


def test_pause_resume__paused_job_fires_nothing_resume_rearms_from_now(user):
    job = new_job(user)
    make_due(job)

    paused = job_pause(job_id=job.id, note="maintenance", actor="test")
    dispatch()

    assert not paused.enabled and paused.paused_note == "maintenance" and paused.paused_at
    assert runs_of(job) == [] and next_row(job) is None
    with pytest.raises(JobStateError):
        job_pause(job_id=job.id, note="again")

    resumed = job_resume(job_id=job.id, actor="ops")
    dispatch()

    assert resumed.enabled and resumed.paused_note == ""
    assert runs_of(job) == []  # the occurrence that fell in the pause is not fired
    assert next_row(job).scheduled_for > job_transitions.db_now()
    with pytest.raises(JobStateError):
        job_resume(job_id=job.id)
    # Who paused (and why) and who resumed, in the job's history; the refused calls wrote nothing.
    actions = TaskExecutionHistory.objects.filter(job=job, kind="operator").order_by("id")
    assert [(h.status, h.worker, h.detail) for h in actions] == [
        ("action", "test", {"reason": "paused", "note": "maintenance"}),
        ("action", "ops", {"reason": "resumed"}),
    ]
    shown = job_history(owner_id=user.id, job_id=job.id).filter(kind="operator")
    assert list(shown) == list(reversed(list(actions)))  # the job's history lists them, newest first


def test_run_now__obeys_the_overlap_policy(user):
    skip = new_job(user, "skip", max_firings=5)
    buffer = new_job(user, "buffer", overlap_policy="buffer_one")

    started = job_run_now(by_staff=False, job_id=skip.id)
    skipped = job_run_now(by_staff=False, job_id=skip.id)
    job_run_now(by_staff=False, job_id=buffer.id)
    buffered = job_run_now(by_staff=False, job_id=buffer.id)

    assert started.outcome == "started" and started.run_id == runs_of(skip)[0].id
    assert skipped.outcome == "skipped" and "still going" in skipped.reason and skipped.run_id is None
    assert buffered.outcome == "buffered" and len(runs_of(buffer)) == 1
    assert Job.objects.get(pk=skip.pk).firing_count == 0  # run now is not a scheduled firing


def test_backfill__past_range_fired_oldest_first_one_at_a_time_and_not_twice(user):
    job = new_job(user)
    end = past_occurrence(job)
    start = past_occurrence(job, back=2)

    queued = job_backfill(by_staff=False, job_id=job.id, start=start, end=end)
    again = job_backfill(by_staff=False, job_id=job.id, start=start, end=end)
    dispatch()

    assert len(queued.queued) == 3 and queued.already == [] and again.queued == []
    assert [r.scheduled_for for r in runs_of(job)] == [start]
    for _ in range(2):
        complete(runs_of(job)[-1])
        dispatch()
    assert [r.scheduled_for for r in runs_of(job)] == queued.queued
    assert job_backfill(by_staff=False, job_id=job.id, start=start, end=end).already == queued.queued


@pytest.mark.parametrize(
    ("delta_start", "delta_end", "field"),
    [(-2, -3, "end"), (-2, 1, "end"), (-24 * 60, 0, "start")],
)
def test_backfill__bad_range__field_error(user, delta_start, delta_end, field):
    from scheduler.workflows import WorkflowInputError

    job = new_job(user, cron="* * * * *")
    now = job_transitions.db_now()

    with pytest.raises(WorkflowInputError) as excinfo:
        job_backfill(
            by_staff=False,
            job_id=job.id,
            start=now + timedelta(hours=delta_start),
            end=now + timedelta(hours=delta_end),
        )

    assert field in excinfo.value.errors and not ScheduledJob.objects.filter(job=job, kind="queued").exists()


def test_backfill__one_off_job__refused(user):
    job = new_job(user, cron="")
    now = job_transitions.db_now()

    with pytest.raises(JobStateError):
        job_backfill(by_staff=False, job_id=job.id, start=now - timedelta(hours=2), end=now)


def test_job_queries__named_statements_loaded_once_without_format_holes():
    names = job_transitions.job_queries()

    assert job_transitions.job_queries() is names
    expected = {"scheduled_claim_due", "scheduled_next_advance", "job_runs_mark_settled", "job_pause"}
    assert expected <= set(names)
    assert all("{" not in text for text in names.values())


def test_claim_due__served_by_the_due_index(user):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN " + job_transitions.job_queries()["scheduled_claim_due"],
            {"limit": 100, "held": [3, 4, 5, 6], "shards": 12},
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "scheduledjob_due_idx" in plan, plan


def test_claim_due__each_row_brings_its_job_as_a_queryset_reads_it(user):
    """The claim builds the jobs from its own columns (no second query): every field - the JSON
    input, the durations, the times - equal to what the ORM reads for the same row."""
    from django.db import transaction

    job = new_job(
        user,
        max_retry=2,
        retry_backoff=timedelta(seconds=7),
        catchup_window=timedelta(minutes=5),
        jitter=3,
        max_firings=9,
        overlap_policy=Job.Overlap.BUFFER_ONE,
        end_at=job_transitions.db_now() + timedelta(days=3),
    )
    make_due(job)
    with transaction.atomic():
        claim = job_transitions.scheduled_claim_due(limit=10)
    (row,) = claim.rows
    stored = Job.objects.get(pk=job.pk)

    assert claim.locked == 1
    assert row.job_id == job.pk and isinstance(row.job, Job) and not row.job._state.adding
    fields = [f.attname for f in Job._meta.concrete_fields]
    assert {f: getattr(row.job, f) for f in fields} == {f: getattr(stored, f) for f in fields}
    assert isinstance(row.job.input, dict) and row.job.input == stored.input != {}


def test_wake__next_row_due_before_beats_next_tick__one_wake_up_for_that_instant(user, settings):
    settings.SAS = {**settings.SAS, "JOBS_DISPATCH_INTERVAL": 1.0}
    now = job_transitions.db_now()
    later = new_job(user, "in-five-seconds", cron="", run_at=now + timedelta(seconds=5))
    assert jobs_dispatch_wake() is None  # beat's next tick comes first

    soon = new_job(user, "in-half-a-second", cron="", run_at=now + timedelta(milliseconds=500))
    row = next_row(soon)
    assert row is not None and next_row(later) is not None

    assert jobs_dispatch_wake() == row.next_execution_at  # a countdown tick sent for it
    assert jobs_dispatch_wake() is None  # once per instant, whichever dispatcher asks again


def test_buffer_one__run_now_as_the_running_run_ends__does_not_overtake_the_buffered_occurrence(user):
    # Issue 20 (b): the running run has ended but is not settled yet (the dispatcher's next tick
    # does that); a "run now" then found no run going and started at once, ahead of the
    # occurrence told it "starts when run X ends".
    job = new_job(user, overlap_policy="buffer_one", idempotent=False)
    job_run_now(by_staff=False, job_id=job.id)
    (first,) = runs_of(job)
    buffered_t = make_due(job)
    dispatch()
    assert [h.scheduled_for for h in history(job, "buffered")] == [buffered_t]
    complete(first)

    late = job_run_now(by_staff=False, job_id=job.id)

    assert late.outcome == "skipped" and "already waits" in late.reason, late
    assert runs_of(job) == [first]
    dispatch()  # settles the ended run: the buffered occurrence's turn
    assert [r.scheduled_for for r in runs_of(job)] == [first.scheduled_for, buffered_t]


def test_shards__a_shard_another_dispatcher_holds__not_fired_until_its_lease_ends(user, settings):
    from scheduler.models import DispatcherShard

    settings.SAS = {**settings.SAS, "JOBS_DISPATCH_SHARDS": 4}
    jobs = [new_job(user, f"once-{i}", cron="") for i in range(24)]
    shard_of = {job.id: job_transitions.shard_of(job.id, 4) for job in jobs}
    assert len(set(shard_of.values())) == 4  # the hash spreads two dozen jobs over every shard
    job_transitions.shards_ensure(shards=4)
    held = shard_of[jobs[0].id]
    DispatcherShard.objects.filter(shard=held).update(
        holder="elsewhere:1", leased_until=job_transitions.db_now() + timedelta(minutes=5)
    )

    first = dispatch()

    fired = set(Run.objects.filter(job__in=jobs).values_list("job_id", flat=True))
    assert fired == {j for j, s in shard_of.items() if s != held}
    assert sorted(first.shards) == sorted({0, 1, 2, 3} - {held})
    assert DispatcherShard.objects.get(shard=held).holder == "elsewhere:1"  # not taken from its holder
    DispatcherShard.objects.filter(shard=held).update(leased_until=job_transitions.db_now())  # it ends

    second = dispatch()

    assert second.shards[0] == held  # least recently ticked first: never ticked
    assert Run.objects.filter(job__in=jobs).count() == 24
    assert set(Run.objects.filter(job__in=jobs).values_list("job_id", flat=True)) == set(shard_of)

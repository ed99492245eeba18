"""Pages read by their ids first (scheduler/paging.py) are Django's pages, and the job page's reads
take the indexes made for them (issue 28's benchmark, bench/outputs.py): the real statements'
plans (EXPLAIN), on a table too small to need them, with sequential scans off - the question is
which index a job with 10,000 runs takes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.paginator import Paginator
from django.db import connection
from django.utils import timezone

from sastools.plans import uses_index
from scheduler.dispatcher.selectors import job_get_counted, job_history, job_runs
from scheduler.models import Job, Run, TaskExecutionHistory
from scheduler.outcomes import run_undone, run_undone_of
from scheduler.paging import IdFirstPaginator

pytestmark = pytest.mark.django_db


@pytest.fixture
def other_user(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="someone-else")


@pytest.fixture
def job_with_runs(user: Any) -> Job:
    """A job with 47 runs, created in threes at the same instant (ties the id must break), and a
    history row per run."""
    job = Job.objects.create(
        owner=user, name="paged", workflow="order_fulfilment", input={}, is_recurring=True, cron="* * * * *"
    )
    base = timezone.now()
    for n in range(47):
        at = base - timedelta(minutes=n // 3)
        run = Run.objects.create(
            workflow="order_fulfilment",
            input={},
            owner=user,
            job=job,
            state="completed",
            scheduled_for=base - timedelta(seconds=n),
        )
        Run.objects.filter(pk=run.pk).update(created_at=at)
        TaskExecutionHistory.objects.create(
            run=run, job=job, kind=TaskExecutionHistory.Kind.JOB, status="succeeded", started_at=at
        )
    return job


@pytest.mark.parametrize(("per_page", "orphans"), [(20, 0), (10, 3), (47, 0), (5, 0)])
def test_id_first_pages__are_djangos_pages(
    user: Any, job_with_runs: Job, per_page: int, orphans: int
) -> None:
    rows = job_runs(owner_id=user.pk, job_id=job_with_runs.pk)
    django = Paginator(rows, per_page, orphans=orphans)
    ours = IdFirstPaginator(rows, per_page, orphans=orphans)

    assert (ours.count, ours.num_pages) == (django.count, django.num_pages)
    for number in django.page_range:
        theirs, mine = django.page(number), ours.page(number)
        assert [r.pk for r in mine] == [r.pk for r in theirs]
        assert [run_undone_of(r) for r in mine] == [run_undone_of(r) for r in theirs]
        assert (mine.has_next(), mine.start_index(), mine.end_index()) == (
            theirs.has_next(),
            theirs.start_index(),
            theirs.end_index(),
        )


def test_id_first_pages__a_known_count__no_count_query(
    user: Any, job_with_runs: Job, django_assert_num_queries: Any
) -> None:
    job = job_get_counted(owner_id=user.pk, job_id=job_with_runs.pk)
    assert (job.runs_count, job.history_count) == (47, 47)  # type: ignore[attr-defined]
    rows = job_runs(owner_id=user.pk, job_id=job.pk)

    with django_assert_num_queries(1):
        page = IdFirstPaginator(rows, 20, count=job.runs_count).get_page(3)  # type: ignore[attr-defined]
        shown = [r.pk for r in page]

    assert len(shown) == 7 and page.paginator.num_pages == 3


def test_job_runs_and_history__another_owner__empty(other_user: Any, job_with_runs: Job) -> None:
    assert not job_runs(owner_id=other_user.pk, job_id=job_with_runs.pk).exists()
    assert not job_history(owner_id=other_user.pk, job_id=job_with_runs.pk).exists()
    with pytest.raises(Job.DoesNotExist):
        job_get_counted(owner_id=other_user.pk, job_id=job_with_runs.pk)


def _plan(queryset: Any) -> str:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_run, scheduler_step, scheduler_taskexecutionhistory")
        # A table this small is read whole, or through a bitmap and sorted; the question is what a
        # job with 10,000 runs takes (bench/outputs.py's EXPLAIN): the index, in its order.
        for setting in ("enable_seqscan", "enable_bitmapscan", "enable_sort", "enable_incremental_sort"):
            cursor.execute(f"SET LOCAL {setting} = off")
    return str(queryset.explain())


def test_plan__a_page_of_a_jobs_runs__in_the_index_order_no_sort(user: Any, job_with_runs: Job) -> None:
    """run_job_created_idx holds the id, the pages' tie-breaker: the page is read in order (main's
    index without it sorted the job's runs on every page: 20-30 ms at OFFSET 9,980)."""
    rows = job_runs(owner_id=user.pk, job_id=job_with_runs.pk)

    for page in (rows[:20], rows[20:40]):
        plan = _plan(page)
        assert "run_job_created_idx" in plan, plan
        assert "Sort" not in plan, plan


def test_plan__a_page_of_a_jobs_history__its_own_index_no_sort(user: Any, job_with_runs: Job) -> None:
    plan = _plan(job_history(owner_id=user.pk, job_id=job_with_runs.pk)[20:40])

    assert uses_index(plan, "history_job_rows_idx"), plan
    # The partitions' indexes are merged in order (Merge Append), never sorted.
    assert "Sort  (" not in plan and "Sort\n" not in plan, plan


def test_plan__did_a_run_undo_anything__the_partial_index(user: Any, job_with_runs: Job) -> None:
    """run_undone's EXISTS probes step_undone_run_idx (compensation steps that reached Processed),
    where the planner hashed a scan of the whole step table."""
    plan = _plan(Run.objects.filter(job=job_with_runs).annotate(undone=run_undone()))

    assert "step_undone_run_idx" in plan, plan

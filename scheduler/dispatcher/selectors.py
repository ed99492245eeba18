"""Reads of jobs for their owners (API, web pages): every selector takes the owner and scopes by it.

Nothing here writes. A job that is not the owner's is not found (`Job.DoesNotExist`), exactly as
one that does not exist: isolation never depends on the view.
"""

from __future__ import annotations

from typing import Any

from cron_descriptor import ExpressionDescriptor, Options
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    IntegerField,
    OuterRef,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce

from scheduler.models import HELD, Job, JobDependency, Run, ScheduledJob, TaskExecutionHistory
from scheduler.outcomes import run_undone

from .cron import ALIASES, cron_normalise


def job_annotate(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """`queryset` with each job's `next_run_at` (its next row's due time; None while held by a
    pause), `last_run_state`,
    `last_run_at` and `last_run_undone` (its latest run, and whether any of its work was undone:
    scheduler/outcomes.py) and `work_left` (a finished job whose run has not ended and been
    settled, or with a retry or a buffered occurrence still to start: issue 28, a one-off job is
    active until its run ends): subqueries that run per row fetched (a page) only, `work_left`
    only for a finished job."""
    latest = Run.objects.filter(job_id=OuterRef("pk")).order_by("-created_at")
    # A next row held by an operator's pause (scheduler/holds.md) is not scheduled: null.
    nxt = ScheduledJob.objects.filter(
        job_id=OuterRef("pk"), kind=ScheduledJob.Kind.NEXT, next_execution_at__lt=HELD
    )
    unsettled = Run.objects.filter(job_id=OuterRef("pk"), job_settled=False)
    queued = ScheduledJob.objects.filter(job_id=OuterRef("pk"))
    return queryset.annotate(
        next_run_at=Subquery(nxt.values("next_execution_at")[:1]),
        last_run_state=Subquery(latest.values("state")[:1]),
        last_run_at=Subquery(latest.values("created_at")[:1]),
        last_run_undone=Subquery(latest.annotate(undone=run_undone()).values("undone")[:1]),
        work_left=Case(
            When(finished_at__isnull=True, then=Value(False)),
            When(Exists(unsettled), then=Value(True)),
            When(Exists(queued), then=Value(True)),
            default=Value(False),
            output_field=BooleanField(),
        ),
    )


def job_list(*, owner_id: int) -> QuerySet[Job]:
    """The owner's jobs, newest first, annotated as `job_annotate` says. One query."""
    return job_annotate(Job.objects.filter(owner_id=owner_id)).order_by("-created_at", "-id")


def job_get(*, owner_id: int, job_id: int) -> Job:
    """The owner's job `job_id` (annotated as in `job_list`); Job.DoesNotExist otherwise."""
    return job_list(owner_id=owner_id).get(pk=job_id)


def job_owned(*, owner_id: int, job_id: int) -> Job:
    """The owner's job `job_id`, its own fields only (none of `job_list`'s annotations: their
    subqueries cost more to build than a page that shows the job's name and zone needs - the
    run page); Job.DoesNotExist otherwise."""
    return Job.objects.get(pk=job_id, owner_id=owner_id)


# A job's own history rows (not its runs' attempts): the job page's and the API's history.
JOB_HISTORY_KINDS = (TaskExecutionHistory.Kind.JOB, TaskExecutionHistory.Kind.OPERATOR)


def _runs_of(job: int | OuterRef) -> QuerySet[Run]:
    """The runs of `job` (an id, or the outer query's job): what `job_runs` pages and counts."""
    return Run.objects.filter(job_id=job)


def _history_of(job: int | OuterRef) -> QuerySet[TaskExecutionHistory]:
    """The history rows of `job` that `job_history` pages and counts."""
    return TaskExecutionHistory.objects.filter(job_id=job, kind__in=JOB_HISTORY_KINDS)


def _counted(rows: QuerySet[Any]) -> Coalesce:
    """`(SELECT count(*) ...)` of the outer job's `rows`, 0 when there are none."""
    counted = rows.order_by().values("job_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def job_get_counted(*, owner_id: int, job_id: int) -> Job:
    """`job_get`, with `runs_count` and `history_count`: how many rows `job_runs` and
    `job_history` have, for the job page's pagers (IdFirstPaginator's `count`) - counted in the
    job's own query (index-only scans of run_job_created_idx and history_job_rows_idx), not in
    a query of their own each."""
    counts = {
        "runs_count": _counted(_runs_of(OuterRef("pk"))),
        "history_count": _counted(_history_of(OuterRef("pk"))),
    }
    return job_list(owner_id=owner_id).annotate(**counts).get(pk=job_id)


def job_runs_count(*, owner_id: int, job_id: int) -> int | None:
    """How many runs `job_runs` has; None when the job is not the owner's (or does not exist).
    One query, none of `job_get`'s annotations (the runs API's count and its 404)."""
    job = Job.objects.filter(pk=job_id, owner_id=owner_id).annotate(n=_counted(_runs_of(OuterRef("pk"))))
    found = job.values_list("n", flat=True).first()
    return None if found is None else int(found)


def _owned(*, owner_id: int, job_id: int) -> Exists:
    """Is job `job_id` the owner's: a condition that does not depend on the row, so PostgreSQL
    checks it once per query (a one-time filter), where a join to the job was made for each of
    the job's rows (10,000 loops for a job with 10,000 runs, bench/outputs.py)."""
    return Exists(Job.objects.filter(pk=job_id, owner_id=owner_id))


def job_runs(*, owner_id: int, job_id: int) -> QuerySet[Run]:
    """The job's runs, newest first (empty for someone else's job). The id breaks ties: runs
    fired in one batch share created_at, and without it pages overlapped (issue 20). The order
    is run_job_created_idx's (job, created_at desc, id desc): a page reads its rows in order,
    never sorts the job's runs."""
    runs = _runs_of(job_id).filter(_owned(owner_id=owner_id, job_id=job_id))
    return runs.annotate(undone=run_undone()).order_by("-created_at", "-id")


def job_history(*, owner_id: int, job_id: int) -> QuerySet[TaskExecutionHistory]:
    """The job's history rows (attempts, skipped and buffered occurrences, and who paused,
    resumed or edited it), newest first, in history_job_rows_idx's order."""
    rows = _history_of(job_id).filter(_owned(owner_id=owner_id, job_id=job_id))
    # Whether the row's run undid anything (scheduler/outcomes.py): "compensated" reads Failed
    # when nothing was.
    return rows.annotate(undone=run_undone("run_id")).order_by("-started_at", "-id")


def job_scheduled(*, owner_id: int, job_id: int) -> QuerySet[ScheduledJob]:
    """What the job will start next: its next occurrence, queued occurrences and retries."""
    return ScheduledJob.objects.filter(job_id=job_id, job__owner_id=owner_id).order_by(
        "scheduled_for", "attempt"
    )


def job_schedule_text(job: Job | Any) -> str:
    """The schedule in words: "At 02:30 (Europe/Berlin)", "Once, at ...", "Once, now"."""
    if not job.is_recurring:
        return f"Once, at {job.run_at:%Y-%m-%d %H:%M %Z}" if job.run_at else "Once"
    text = cron_normalise(job.cron)
    expression = ALIASES.get(text, text)
    try:
        words = ExpressionDescriptor(expression, Options()).get_description()
    except Exception:  # a description is a courtesy; the expression itself was validated
        words = expression
    return f"{words} ({job.timezone})"


def _edge_data(edge: JobDependency, *, other: Job) -> dict[str, Any]:
    return {
        "job": other.pk,
        "name": other.name,
        "condition": edge.condition,
        "last_outcome": edge.last_outcome,
        "last_logical_time": edge.last_logical_time,
        "last_matched": edge.last_matched,
    }


def job_edges(*, owner_id: int, job_id: int) -> dict[str, list[dict[str, Any]]]:
    """A job's `parents` and `children` (issue 30), each edge with its condition and the last
    outcome of its parent it saw; only the owner's (another's job: empty lists). Two queries."""
    parents = JobDependency.objects.filter(child_id=job_id, child__owner_id=owner_id).select_related("parent")
    children = JobDependency.objects.filter(parent_id=job_id, parent__owner_id=owner_id).select_related(
        "child"
    )
    return {
        "parents": [_edge_data(e, other=e.parent) for e in parents.order_by("parent__name")],
        "children": [_edge_data(e, other=e.child) for e in children.order_by("child__name")],
    }


def job_graph(*, owner_id: int) -> tuple[list[Job], list[JobDependency]]:
    """The owner's jobs that have an edge, and the edges (the graph page). Jobs annotated as
    `job_list`'s (their last run's state)."""
    edges = list(JobDependency.objects.filter(child__owner_id=owner_id).order_by("parent_id", "child_id"))
    ids = {e.parent_id for e in edges} | {e.child_id for e in edges}
    jobs = list(job_annotate(Job.objects.filter(owner_id=owner_id, pk__in=ids)).order_by("name"))
    return jobs, edges


def job_ids_by_name(*, owner_id: int, names: list[str]) -> dict[str, int]:
    """name -> id of the owner's jobs among `names` ("#12" also finds the owner's job 12)."""
    by_id = [int(n[1:]) for n in names if n.startswith("#") and n[1:].isdigit() and len(n) < 19]
    found: dict[str, int] = {}
    for pk, name in Job.objects.filter(owner_id=owner_id, name__in=names).values_list("pk", "name"):
        found[name] = pk
    for pk in Job.objects.filter(owner_id=owner_id, pk__in=by_id).values_list("pk", flat=True):
        found[f"#{pk}"] = pk
    return found

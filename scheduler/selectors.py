"""Read-only queries for the scheduler's admin: run lists with their counts, overdue steps.

Nothing here writes. Every count that the admin shows per row is a correlated subquery, so a
changelist page costs the same number of queries whatever its size, and the subqueries run only
for the rows on the page (PostgreSQL evaluates select-list subqueries after LIMIT).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce, Now

from .models import Run, Step
from .workflows import get_workflow, registered_workflows

# Forward steps whose work was done (and maybe undone since): they count as progress.
_DONE_STATES = (Step.State.PROCESSED, Step.State.COMPENSATING, Step.State.COMPENSATED)


def count_per_run(queryset: QuerySet[Any]) -> Coalesce:
    """`(SELECT count(*) ... )` correlated on `run_id = OuterRef("pk")`, 0 when there is none."""
    counted = queryset.order_by().values("run_id").annotate(n=Count("pk")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), Value(0))


def run_list_annotated(*, queryset: QuerySet[Run] | None = None) -> QuerySet[Run]:
    """Runs with `steps_total` and `steps_done` (forward steps) per row, and their owner joined
    in (`ops.selectors.run_list_with_alerts` adds the open alerts)."""
    qs = Run.objects.all() if queryset is None else queryset
    forward = Step.objects.filter(run_id=OuterRef("pk"), kind=Step.Kind.FORWARD)
    return qs.select_related("owner").annotate(
        steps_total=count_per_run(forward),
        steps_done=count_per_run(forward.filter(process_state__in=_DONE_STATES)),
    )


def run_has_overdue_step_q() -> Q:
    """Runs with a step still Processing past its complete-by (the supervisor is behind or down)."""
    return Q(Exists(step_overdue_queryset().filter(run_id=OuterRef("pk"))))


def step_overdue_queryset() -> QuerySet[Step]:
    """Processing steps whose complete-by has passed (served by step_processing_deadline_idx)."""
    return Step.objects.filter(process_state=Step.State.PROCESSING, complete_by__lt=Now())


def steps_overdue_count() -> int:
    """How many steps are Processing past their deadline. Normally 0: the supervisor returns
    each to Pending (or Error) within one sweep interval."""
    return step_overdue_queryset().count()


def run_state_counts() -> dict[str, int]:
    """Runs per state, every state present (0 when none), in the order of `Run.State`."""
    rows = Run.objects.order_by().values_list("state").annotate(n=Count("pk"))
    found = {state: n for state, n in rows}
    return {state: found.get(state, 0) for state in Run.State.values}


def workflow_names() -> list[str]:
    """Registered workflows (from code, not a DISTINCT over the runs table)."""
    return registered_workflows()


def workflow_step_names() -> list[str]:
    """Every step name (forward and compensation) of every registered workflow, sorted."""
    names: set[str] = set()
    for workflow in registered_workflows():
        for step in get_workflow(workflow).steps:
            names.add(step.name)
            if step.compensation is not None:
                names.add(step.compensation.name)
    return sorted(names)

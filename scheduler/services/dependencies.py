"""Dependencies between jobs (issue 30, item 1): what the API, the job form and the admin call
to read and write a job's parents. The rules (one owner, no cycle, no staff-only work for someone
who may not schedule it, the conditions) are checked here, once, for all of them; bad input
raises WorkflowInputError on the field `parents` (the API's 400 and the form's error name it)
and writes nothing. The dispatcher's side (a parent's outcome reaching its children):
`scheduler/dispatcher/dependents.py`; the rules: `scheduler/jobs.md`, "Dependencies".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from scheduler.dispatcher import transitions as job_transitions
from scheduler.limits import quota_lock
from scheduler.models import DependencyCondition, Job, JobDependency
from scheduler.workflows import WorkflowInputError, get_workflow

from .job_input import job_permit

# A job's parents at most (a fan-in wider than this is a sign of a mistake, and the graph page
# draws every edge).
PARENTS_MAX = 50
FIELD = "parents"
SHAPE = 'a list of {"job": <id>, "condition": <on_success|on_failure|on_either>}'


@dataclass(frozen=True)
class ParentSpec:
    """One edge into a job: its parent's id and the condition."""

    job_id: int
    condition: str


def parents_parse(value: Any) -> list[ParentSpec]:
    """The `parents` of a request - a list of {"job": id, "condition": ...} (condition optional,
    on_success by default) - checked for shape only. Raises WorkflowInputError on `parents`."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise WorkflowInputError({FIELD: SHAPE})
    errors: list[str] = []
    specs: list[ParentSpec] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping) or set(item) - {"job", "condition"}:
            errors.append(f'item {index}: must be {{"job": <id>, "condition": ...}}')
            continue
        job_id, condition = item.get("job"), item.get("condition", DependencyCondition.ON_SUCCESS)
        if isinstance(job_id, bool) or not isinstance(job_id, int):
            errors.append(f"item {index}: job must be a job id (a whole number)")
        elif condition not in DependencyCondition.values:
            errors.append(f"item {index}: condition must be one of {', '.join(DependencyCondition.values)}")
        else:
            specs.append(ParentSpec(job_id, str(condition)))
    if errors:
        raise WorkflowInputError({FIELD: errors})
    return specs


def _clean(
    *, owner_id: int, by_staff: bool, child: Job | None, specs: Sequence[ParentSpec]
) -> dict[int, Job]:
    """Every rule but the cycle; raises WorkflowInputError on `parents`. Returns the parents."""
    errors: list[str] = []
    if len(specs) > PARENTS_MAX:
        raise WorkflowInputError({FIELD: f"at most {PARENTS_MAX} parents"})
    ids = [s.job_id for s in specs]
    if len(set(ids)) != len(ids):
        errors.append("a job is listed twice")
    # Another owner's job is "not one of yours", whether it exists or not (no probing).
    parents = Job.objects.filter(owner_id=owner_id).in_bulk(ids)
    for spec in specs:
        if spec.job_id not in parents:
            errors.append(f"job #{spec.job_id} is not one of your jobs")
        elif child is not None and spec.job_id == child.pk:
            errors.append("a job cannot depend on itself")
    for job in [*parents.values(), *([child] if child is not None else [])]:
        if not specs:
            break
        try:
            job_permit(workflow=get_workflow(job.workflow), owner_id=owner_id, by_staff=by_staff)
        except WorkflowInputError as exc:
            messages = "; ".join(exc.errors.get("workflow", [str(exc)]))
            errors.append(f"job '{job.name}' (#{job.pk}) cannot be linked: {messages}")
    if errors:
        raise WorkflowInputError({FIELD: errors})
    return parents


def _cycle(*, owner_id: int, child_id: int, parent_ids: Sequence[int]) -> list[int] | None:
    """A path child -> ... -> parent through the owner's edges (the new edge parent -> child
    would close it into a cycle), or None. Reads the owner's edges (under the owner's lock)."""
    children: dict[int, list[int]] = {}
    edges = JobDependency.objects.filter(child__owner_id=owner_id).values_list("parent_id", "child_id")
    for parent, child in edges:
        if child != child_id:  # the child's own in-edges are being replaced
            children.setdefault(parent, []).append(child)
    targets = set(parent_ids)
    stack: list[list[int]] = [[child_id]]
    seen = {child_id}
    while stack:
        path = stack.pop()
        for nxt in children.get(path[-1], []):
            if nxt in targets:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append([*path, nxt])
    return None


def job_parents_check(*, owner_id: int, by_staff: bool, child: Job | None, parents: Any) -> list[ParentSpec]:
    """The checks of `job_parents_set` without writing (a new job's form and API ask them
    before `job_create`): shape, owner, staff-only work. Raises WorkflowInputError on `parents`."""
    specs = parents_parse(parents)
    _clean(owner_id=owner_id, by_staff=by_staff, child=child, specs=specs)
    return specs


def job_parents_set(*, job_id: int, by_staff: bool, parents: Any, actor: str = "") -> list[JobDependency]:
    """Replace the job's parents with `parents` ([{"job": id, "condition": ...}]). Invariant: one
    owner, no cycle, no staff-only work for someone who may not schedule it (`job_permit`, the
    rule of `job_create`), at most PARENTS_MAX; bad input raises WorkflowInputError on `parents`
    and writes nothing. An edit that changed something leaves an operator history row (`actor`,
    "parents"). Gates already open keep what has arrived; a removed parent is no longer waited
    for. Transaction: one atomic block under the owner's lock (`quota_lock`: the cycle check
    and the write see every edit of that owner one after another). Returns the job's edges."""
    specs = parents_parse(parents)
    with transaction.atomic():
        child = Job.objects.select_for_update().get(pk=job_id)
        quota_lock(owner_id=child.owner_id)
        _clean(owner_id=child.owner_id, by_staff=by_staff, child=child, specs=specs)
        path = _cycle(owner_id=child.owner_id, child_id=child.pk, parent_ids=[s.job_id for s in specs])
        if path is not None:
            names = dict(Job.objects.filter(pk__in=path).values_list("pk", "name"))
            loop = " -> ".join(f"'{names[p]}'" for p in [path[-1], *path])
            raise WorkflowInputError({FIELD: f"a cycle: {loop} (a job cannot wait for itself)"})
        changed = _write(child=child, specs=specs)
        if changed:
            job_transitions.job_edit_record(job_id=child.pk, actor=actor, changed=[FIELD])
        return list(JobDependency.objects.filter(child=child).order_by("parent_id"))


def _write(*, child: Job, specs: Sequence[ParentSpec]) -> bool:
    """The child's in-edges made `specs`; whether anything changed. Caller's transaction."""
    wanted = {s.job_id: s.condition for s in specs}
    current = {e.parent_id: e for e in JobDependency.objects.filter(child=child)}
    gone = [pk for pk in current if pk not in wanted]
    if gone:
        JobDependency.objects.filter(child=child, parent_id__in=gone).delete()
    changed = bool(gone)
    for parent_id, condition in wanted.items():
        edge = current.get(parent_id)
        if edge is None:
            JobDependency.objects.create(
                parent_id=parent_id, child=child, owner_id=child.owner_id, condition=condition
            )
            changed = True
        elif edge.condition != condition:
            JobDependency.objects.filter(pk=edge.pk).update(condition=condition)
            changed = True
    return changed


def job_parents_create(*, child: Job, parents: Sequence[ParentSpec]) -> None:
    """A new job's edges (checked by `job_parents_check`; a new job closes no cycle: nothing
    depends on it yet). Transaction: `job_create`'s."""
    JobDependency.objects.bulk_create(
        [
            JobDependency(parent_id=s.job_id, child=child, owner_id=child.owner_id, condition=s.condition)
            for s in parents
        ]
    )

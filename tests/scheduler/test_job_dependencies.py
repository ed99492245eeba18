"""Dependencies between jobs (issue 30, item 1) on the real database, one dispatcher tick at a
time (the test plays the agents): a child runs once for its parent's occurrence time under the
edge's condition; fan-in waits for every parent; a parent's outcome that does not match fires
nothing and says why in the child's history; cycles, other owners' jobs and staff-only work
are refused on `parents` with nothing written; a backfill fires dependents only when asked.
The two-dispatcher SIGKILL version: test_job_dependencies_live.py."""

from __future__ import annotations

import time
from typing import Any

import pytest

from ops.roles import OPERATOR_GROUP
from scheduler.models import DependencyGate, Job, JobDependency, Run, ScheduledJob, TaskExecutionHistory
from scheduler.services import job_backfill, job_delete, job_pause, job_resume, job_run_now
from scheduler.services.dependencies import job_parents_set
from scheduler.workflows import WorkflowInputError
from tests.roles import staff_in

from .jobs_support import compensate, complete, dispatch, make_due, new_job, past_occurrence, runs_of

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

H = TaskExecutionHistory


def child_of(user: Any, *parents: tuple[Job, str], name: str = "child", **fields: Any) -> Job:
    """A one-off job with parents and no run time: it runs only when they end."""
    edges = [{"job": p.pk, "condition": c} for p, c in parents]
    return new_job(user, name=name, cron="", parents=edges, **fields)


def fire_and_end(job: Job, end: Any, *, back: int = 0) -> Any:
    t = make_due(job, back=back)
    dispatch()
    (run,) = [r for r in runs_of(job) if r.scheduled_for == t]
    end(run)
    return t


def test_chain__parent_succeeds__child_runs_once_for_the_parents_time(user: Any) -> None:
    a = new_job(user, name="a")
    b = child_of(user, (a, "on_success"), name="b")
    c = child_of(user, (b, "on_success"), name="c")
    assert not ScheduledJob.objects.filter(job__in=[b, c]).exists()  # no schedule of their own

    t = fire_and_end(a, complete)
    done = dispatch()  # settle a's run: b's gate completes, b's run starts in the same tick

    assert done.dependents == 1
    (run_b,) = runs_of(b)
    assert run_b.scheduled_for == t and run_b.job_attempt == 0
    started = H.objects.get(job=b, run=run_b)
    assert started.detail["reason"] == "dependency"
    complete(run_b)
    dispatch()
    (run_c,) = runs_of(c)
    assert run_c.scheduled_for == t  # the logical time travels down the chain
    for _ in range(3):  # nothing fires twice
        dispatch()
    assert len(runs_of(b)) == 1 and len(runs_of(c)) == 1
    edge = JobDependency.objects.get(parent=a, child=b)
    assert (edge.last_outcome, edge.last_logical_time, edge.last_matched) == ("succeeded", t, True)


def test_on_success__parent_fails__child_not_fired_and_its_history_says_why(user: Any) -> None:
    a = new_job(user, name="import")
    b = child_of(user, (a, "on_success"), name="report")

    t = fire_and_end(a, compensate)
    dispatch()

    assert runs_of(b) == []
    (row,) = H.objects.filter(job=b)
    assert row.status == "skipped" and row.scheduled_for == t
    assert row.detail["reason"] == (
        f"not fired: parent job 'import' (#{a.pk}) ended failed for {t.isoformat()}; "
        "the edge runs this job on_success"
    )
    assert row.detail["parent_outcome"] == "failed" and row.detail["condition"] == "on_success"
    assert DependencyGate.objects.get(child=b, logical_time=t).fired_at is None


@pytest.mark.parametrize(("end", "fires"), [(compensate, True), (complete, False)])
def test_on_failure__fires_only_when_the_parent_failed(user: Any, end: Any, fires: bool) -> None:
    a = new_job(user, name="a")
    cleanup = child_of(user, (a, "on_failure"), name="cleanup")

    t = fire_and_end(a, end)
    dispatch()

    assert [r.scheduled_for for r in runs_of(cleanup)] == ([t] if fires else [])


@pytest.mark.parametrize("end", [compensate, complete])
def test_on_either__fires_after_any_ending(user: Any, end: Any) -> None:
    a = new_job(user, name="a")
    b = child_of(user, (a, "on_either"))

    t = fire_and_end(a, end)
    dispatch()

    assert [r.scheduled_for for r in runs_of(b)] == [t]


def test_parent_retries__child_waits_for_the_occurrences_last_attempt(user: Any) -> None:
    a = new_job(user, name="a", max_retry=1, retry_backoff=0.01)
    b = child_of(user, (a, "on_success"))

    t = fire_and_end(a, compensate)  # attempt 0 fails: a retry follows, not an outcome yet
    dispatch()
    assert runs_of(b) == [] and not H.objects.filter(job=b).exists()
    time.sleep(0.05)
    dispatch()  # the retry is due (its backoff has passed)
    (retry,) = [r for r in runs_of(a) if r.job_attempt == 1]
    complete(retry)
    dispatch()

    assert [r.scheduled_for for r in runs_of(b)] == [t]


def test_fan_in__child_runs_when_all_parents_succeeded_for_the_same_time(user: Any) -> None:
    a = new_job(user, name="a")
    b = new_job(user, name="b")
    c = child_of(user, (a, "on_success"), (b, "on_success"))

    t = fire_and_end(a, complete)
    dispatch()
    assert runs_of(c) == []  # b has not ended for t
    assert job_run_now(job_id=b.pk, by_staff=False).outcome == "started"  # another logical time
    (now_run,) = runs_of(b)
    complete(now_run)
    dispatch()
    assert runs_of(c) == []
    assert fire_and_end(b, complete) == t
    dispatch()

    assert [r.scheduled_for for r in runs_of(c)] == [t]
    gates = {g.logical_time: sorted(g.arrived) for g in DependencyGate.objects.filter(child=c)}
    assert gates[t] == sorted([a.pk, b.pk]) and len(gates) == 2


def test_fan_in__one_parent_failed__never_fires_for_that_time(user: Any) -> None:
    a = new_job(user, name="a")
    b = new_job(user, name="b")
    c = child_of(user, (a, "on_success"), (b, "on_success"))

    fire_and_end(a, compensate)
    dispatch()
    fire_and_end(b, complete)
    dispatch()

    assert runs_of(c) == []
    assert [h.detail["parent_job_id"] for h in H.objects.filter(job=c)] == [a.pk]


def test_paused_child__its_run_waits_for_the_resume(user: Any) -> None:
    a = new_job(user, name="a")
    b = child_of(user, (a, "on_success"))
    job_pause(job_id=b.pk, actor="t")

    t = fire_and_end(a, complete)
    dispatch()
    assert runs_of(b) == []
    assert ScheduledJob.objects.get(job=b).next_execution_at is None  # parked

    job_resume(job_id=b.pk, actor="t")
    dispatch()
    assert [r.scheduled_for for r in runs_of(b)] == [t]


def test_deleted_parent__child_waits_only_for_the_others(user: Any) -> None:
    a = new_job(user, name="a")
    gone = new_job(user, name="gone")
    c = child_of(user, (a, "on_success"), (gone, "on_success"))

    job_delete(job_id=gone.pk, actor="t")
    t = fire_and_end(a, complete)
    dispatch()

    assert not JobDependency.objects.filter(parent_id=gone.pk).exists()
    assert [r.scheduled_for for r in runs_of(c)] == [t]


@pytest.mark.parametrize("dependents", [False, True])
def test_backfill__fires_dependents_only_when_asked(user: Any, dependents: bool) -> None:
    a = new_job(user, name="a", overlap_policy="allow_all")
    b = child_of(user, (a, "on_success"), overlap_policy="allow_all")
    times = [past_occurrence(a, back=2), past_occurrence(a, back=1)]

    job_backfill(job_id=a.pk, by_staff=False, start=times[0], end=times[1], dependents=dependents)
    dispatch()
    for run in runs_of(a):
        complete(run)
    dispatch()

    assert sorted(r.scheduled_for for r in runs_of(b) if r.scheduled_for) == (times if dependents else [])


def _snapshot() -> tuple[Any, ...]:
    return (
        sorted(JobDependency.objects.values_list("parent_id", "child_id", "condition")),
        H.objects.count(),
        Job.objects.count(),
    )


def test_cycle__refused_on_parents_and_nothing_written(user: Any) -> None:
    a = new_job(user, name="a")
    b = child_of(user, (a, "on_success"), name="b")
    c = child_of(user, (b, "on_either"), name="c")
    before = _snapshot()

    with pytest.raises(WorkflowInputError) as refused:
        job_parents_set(job_id=a.pk, by_staff=False, parents=[{"job": c.pk, "condition": "on_success"}])
    assert refused.value.errors == {
        "parents": ["a cycle: 'c' -> 'a' -> 'b' -> 'c' (a job cannot wait for itself)"]
    }
    with pytest.raises(WorkflowInputError) as itself:
        job_parents_set(job_id=a.pk, by_staff=False, parents=[{"job": a.pk}])
    assert itself.value.errors == {"parents": ["a job cannot depend on itself"]}
    assert _snapshot() == before


def test_other_owners_job__refused_as_not_yours_and_nothing_written(
    user: Any, django_user_model: Any
) -> None:
    mine = new_job(user, name="mine")
    theirs = new_job(django_user_model.objects.create(username="eve"), name="theirs")
    before = _snapshot()

    for call in (
        lambda: job_parents_set(job_id=mine.pk, by_staff=False, parents=[{"job": theirs.pk}]),
        lambda: new_job(user, name="new", cron="", parents=[{"job": theirs.pk}]),
        lambda: job_parents_set(job_id=mine.pk, by_staff=False, parents=[{"job": 10**9}]),
    ):
        with pytest.raises(WorkflowInputError) as refused:
            call()
        assert list(refused.value.errors) == ["parents"]
        assert "is not one of your jobs" in refused.value.errors["parents"][0]
    assert _snapshot() == before


def test_staff_only_work__customer_cannot_link_it__staff_can(user: Any) -> None:
    mine = new_job(user, name="mine")
    legacy = new_job(user, name="legacy")
    Job.objects.filter(pk=legacy.pk).update(workflow="catalogue.reprice")  # staff-only now
    before = _snapshot()

    with pytest.raises(WorkflowInputError) as refused:
        job_parents_set(job_id=mine.pk, by_staff=False, parents=[{"job": legacy.pk}])
    (message,) = refused.value.errors["parents"]
    assert message.startswith(
        f"job 'legacy' (#{legacy.pk}) cannot be linked: 'catalogue.reprice' is staff-only"
    )
    assert _snapshot() == before

    ops = staff_in("ops-deps", OPERATOR_GROUP)
    theirs = new_job(ops, name="theirs")
    staff_job = new_job(ops, name="staff-only")
    Job.objects.filter(pk=staff_job.pk).update(workflow="catalogue.reprice")
    (edge,) = job_parents_set(job_id=theirs.pk, by_staff=True, parents=[{"job": staff_job.pk}])
    assert edge.parent_id == staff_job.pk


@pytest.mark.parametrize(
    ("parents", "message"),
    [
        ("x", 'a list of {"job": <id>, "condition": <on_success|on_failure|on_either>}'),
        ([{"job": "1"}], "item 0: job must be a job id (a whole number)"),
        (
            [{"job": 1, "condition": "sometimes"}],
            "item 0: condition must be one of on_success, on_failure, on_either",
        ),
    ],
)
def test_bad_shape__refused_on_parents(user: Any, parents: Any, message: str) -> None:
    mine = new_job(user, name="mine")
    with pytest.raises(WorkflowInputError) as refused:
        job_parents_set(job_id=mine.pk, by_staff=False, parents=parents)
    assert refused.value.errors == {"parents": [message]}


def test_edit__replaces_the_edges_and_records_who(user: Any) -> None:
    a, b = new_job(user, name="a"), new_job(user, name="b")
    c = child_of(user, (a, "on_success"))

    edges = job_parents_set(
        job_id=c.pk, by_staff=False, parents=[{"job": b.pk, "condition": "on_failure"}], actor="bob"
    )

    assert [(e.parent_id, e.condition) for e in edges] == [(b.pk, "on_failure")]
    row = H.objects.get(job=c, kind="operator")
    assert row.worker == "bob" and row.detail == {"reason": "edited", "changed": ["parents"]}
    assert Run.objects.count() == 0


def test_parents_busy__while_a_parents_run_is_not_settled(user: Any) -> None:
    from scheduler.dispatcher.transitions import dependency_parents_busy

    a = new_job(user, name="a")
    lone = new_job(user, name="lone")
    make_due(lone)
    dispatch()
    assert not dependency_parents_busy()  # no edge: a run going does not count
    child_of(user, (a, "on_success"))
    assert not dependency_parents_busy()  # an edge, no run of its parent
    make_due(a)
    dispatch()
    assert dependency_parents_busy()  # a parent's run going
    complete(runs_of(a)[0])
    assert dependency_parents_busy()  # ended, not settled
    dispatch()
    assert not dependency_parents_busy()

"""Dependencies between jobs (issue 30) with real processes on committed rows: two dispatcher
processes (one SIGKILLed while its settle holds gates it has written and not committed), two
agent workers (one SIGKILLed with steps in flight), a control worker claiming and sweeping.
Chains A -> B -> C, fan-ins (P, Q) -> F, and failing parents with an on_failure child (fires)
and an on_success child (fires nothing, says why): every dependent run is written once, for its
parent's logical time.

The test plays beat: it sends the dispatcher's tick to the dispatchers' own queue, and the
supervisor's sweep and the scheduler's tick, every BEAT_EVERY seconds."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
from celery import current_app

from sastools.harness import wait_for
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.tick import DEPENDENTS_PAUSE_MARKER
from scheduler.models import Job, Run, TaskExecutionHistory
from scheduler.services import job_create

from .deps_workflow import DEPS_QUEUE, DEPS_WORKFLOW, MODULES, register_deps_workflow
from .test_jobs_live import beat_dispatcher_off, owner

__all__ = ["beat_dispatcher_off", "owner"]

BEAT_EVERY = 1.0
QUEUE = "jobs-deps"
CHAINS, FAN_INS, FAILING = 12, 6, 4


class Beat:
    """Every BEAT_EVERY s: a dispatcher tick to QUEUE, the supervisor's sweep, the scheduler's tick."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            current_app.send_task("scheduler.jobs_dispatch", queue=QUEUE, expires=5 * BEAT_EVERY)
            current_app.send_task("supervisor.sweep", queue="supervisor", expires=5 * BEAT_EVERY)
            current_app.send_task("scheduler.tick", queue="scheduler", expires=5 * BEAT_EVERY)
            self.stop.wait(BEAT_EVERY)

    def __enter__(self) -> Beat:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def _job(
    owner: Any, name: str, *, at: datetime | None = None, fail: bool = False, parents: Any = None
) -> Job:
    return job_create(
        by_staff=False,
        owner_id=owner.id,
        name=name,
        workflow=DEPS_WORKFLOW,
        input={"fail": fail},
        run_at=at,
        parents=parents,
    )


def _graph(owner: Any, at: datetime) -> dict[str, Any]:
    """The jobs: each root one-off at `at` + a few hundred ms apart (its logical time)."""
    g: dict[str, Any] = {"chains": [], "fan_ins": [], "failing": []}
    for i in range(CHAINS):
        a = _job(owner, f"a{i}", at=at + timedelta(milliseconds=50 * i))
        b = _job(owner, f"b{i}", parents=[{"job": a.pk, "condition": "on_success"}])
        c = _job(owner, f"c{i}", parents=[{"job": b.pk, "condition": "on_success"}])
        g["chains"].append((a, b, c))
    for i in range(FAN_INS):
        t = at + timedelta(seconds=1, milliseconds=100 * i)
        p, q = _job(owner, f"p{i}", at=t), _job(owner, f"q{i}", at=t)
        f = _job(owner, f"f{i}", parents=[{"job": p.pk}, {"job": q.pk}])
        g["fan_ins"].append((p, q, f))
    for i in range(FAILING):
        x = _job(owner, f"x{i}", at=at + timedelta(seconds=2, milliseconds=100 * i), fail=True)
        cleanup = _job(owner, f"cleanup{i}", parents=[{"job": x.pk, "condition": "on_failure"}])
        report = _job(owner, f"report{i}", parents=[{"job": x.pk, "condition": "on_success"}])
        g["failing"].append((x, cleanup, report))
    return g


def _runs(job: Job) -> list[Run]:
    return list(Run.objects.filter(job=job).order_by("created_at"))


@pytest.fixture
def workers(beat_dispatcher_off: None, start_worker: Any) -> dict[str, Any]:
    common = {"SAS_WORKFLOW_MODULES": MODULES, "SAS_QUOTA_RUNS_IN_FLIGHT": "0"}
    dispatch = {
        "SAS_JOBS_DISPATCH_QUEUE": QUEUE,
        "SAS_JOBS_DISPATCH_INTERVAL": str(BEAT_EVERY),
        "SAS_JOBS_DISPATCH_LEASE_SECONDS": "3",
        **common,
    }
    return {
        "victim": start_worker(
            name="deps-victim",
            queues=QUEUE,
            concurrency=1,
            pool="solo",
            SAS_JOBS_TEST_PAUSE_AFTER_DEPENDENTS="120",
            **dispatch,
        ),
        "survivor": start_worker(name="deps-survivor", queues=QUEUE, concurrency=1, pool="solo", **dispatch),
        "control": start_worker(name="deps-control", queues="scheduler,supervisor,default", **common),
        "agent-1": start_worker(name="deps-agent-1", queues=DEPS_QUEUE, concurrency=2, **common),
        "agent-2": start_worker(name="deps-agent-2", queues=DEPS_QUEUE, concurrency=2, **common),
    }


def test_chains_fan_ins_and_failures__dispatcher_and_worker_sigkilled__every_dependent_run_once(
    workers: dict[str, Any], owner: Any
) -> None:
    register_deps_workflow()
    g = _graph(owner, job_transitions.db_now() + timedelta(seconds=2))
    roots = [a for a, _, _ in g["chains"]] + [j for p, q, _ in g["fan_ins"] for j in (p, q)]
    roots += [x for x, _, _ in g["failing"]]
    victim = workers["victim"]

    with Beat():
        wait_for(
            lambda: DEPENDENTS_PAUSE_MARKER in victim.log(),
            timeout=120,
            interval=0.2,
            what="a settle of the victim to queue dependent runs and pause before its commit",
        )
        # An agent worker dies with steps in flight (their deadlines pass; the sweep retries them).
        wait_for(
            lambda: Run.objects.filter(job__owner=owner, state="running").exists(),
            timeout=60,
            interval=0.1,
            what="a run in flight",
        )
        workers["agent-1"].kill()
        victim.kill()  # its settle's gates and queued rows are rolled back; the survivor redoes them
        leaves = [c for _, _, c in g["chains"]] + [f for _, _, f in g["fan_ins"]]
        leaves += [cleanup for _, cleanup, _ in g["failing"]]
        wait_for(
            lambda: all(Run.objects.filter(job=j, state="completed").exists() for j in leaves),
            timeout=240,
            interval=1.0,
            what="every chain's last job, fan-in child and on_failure child to complete",
        )
        # Every root's run settled (its dependents decided), and a few more ticks change nothing.
        wait_for(
            lambda: not Run.objects.filter(job__owner=owner, job_settled=False).exists(),
            timeout=60,
            what="every run settled",
        )
        counted = Counter(Run.objects.filter(job__owner=owner).values_list("job_id", "scheduled_for"))
        threading.Event().wait(3 * BEAT_EVERY)

    assert Counter(Run.objects.filter(job__owner=owner).values_list("job_id", "scheduled_for")) == counted
    assert set(counted.values()) == {1}, "a (job, logical time) ran twice"
    for a, b, c in g["chains"]:
        (ra,), (rb,), (rc,) = _runs(a), _runs(b), _runs(c)
        assert ra.scheduled_for == rb.scheduled_for == rc.scheduled_for == a.run_at
    for p, _q, f in g["fan_ins"]:
        assert [r.scheduled_for for r in _runs(f)] == [p.run_at]
    for x, cleanup, report in g["failing"]:
        assert [r.state for r in _runs(x)] == ["compensated"]
        assert [r.scheduled_for for r in _runs(cleanup)] == [x.run_at]
        assert _runs(report) == []
        (why,) = TaskExecutionHistory.objects.filter(job=report)
        assert why.status == "skipped" and why.detail["parent_job_id"] == x.pk
    # Every run of the graph: the roots once, and each dependent once.
    assert len(counted) == len(roots) + 2 * CHAINS + FAN_INS + FAILING
    # What the victim had committed before the kill stays (on a loaded machine it settles some
    # parents first), and its uncommitted settle left nothing twice: each dependency row names a
    # (job, logical time) once, as each run does.
    dependency_rows = Counter(
        TaskExecutionHistory.objects.filter(job__owner=owner, detail__reason="dependency").values_list(
            "job_id", "scheduled_for"
        )
    )
    assert set(dependency_rows.values()) <= {1}, dependency_rows

"""Fair share per owner on the session's real workers, beat, PostgreSQL, Redis and simulator
(issue 18, docs/operating/fairness.md): one owner's backlog of hundreds of due steps does not hold another
owner's due step back, and a job occurrence that waited past its schedule-to-start is skipped by
the real supervisor. The claims' order is asserted, never wall time."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models.functions import Now

from agents.http_call import HTTP_CALL_WORKFLOW
from scheduler.dispatcher.transitions import db_now
from scheduler.models import Run, Step, TaskExecutionHistory
from scheduler.services import RunSpec, job_create, job_run_now, runs_submit_many
from scheduler.workflows import get_workflow
from tests.conftest import wait_for
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

from .helpers import wait_run

BACKLOG = 300
# A's step must be among the first K claims made once it is due. The fair claim makes it the
# first or second (docs/operating/fairness.md); K leaves room for claims already in flight when it came due
# (a reply's "one more" racing the submit). Without fairness it is claimed after B's backlog.
K = 8


def _specs(owner, n: int, url: str) -> list[RunSpec]:
    definition = get_workflow(HTTP_CALL_WORKFLOW)
    body = {"method": "POST", "url": url, "body": {"n": 1}}
    return [RunSpec(definition=definition, input=definition.validate(body), owner_id=owner.id)] * n


def _attempts_since(run_ids_of_a: list, since) -> list[bool]:
    """Every attempt started since `since`, in claim order: True for A's."""
    rows = (
        TaskExecutionHistory.objects.filter(kind="attempt", started_at__gte=since)
        .order_by("started_at", "id")
        .values_list("run_id", flat=True)
    )
    return [run_id in run_ids_of_a for run_id in rows]


def _owners():
    # Not pytest-django's django_user_model: it brings the `db` fixture, whose transaction the
    # workers would never see. Users outlive a live test (live_db truncates the engine's tables).
    users = get_user_model().objects
    return users.get_or_create(username="fair-live-a")[0], users.get_or_create(username="fair-live-b")[0]


def test_backlog_of_one_owner__another_owners_newer_step__among_the_first_claims(engine):
    a, b = _owners()
    url = f"{engine.sim.base_url}/echo"
    with transaction.atomic():
        written_at = db_now()
        runs_submit_many(_specs(b, BACKLOG, url))
        (a_run,) = runs_submit_many(_specs(a, 1, url))  # the newest Pending row of all
    assert a_run is not None

    wait_run(a_run, (Run.State.COMPLETED,), timeout=120)

    order = _attempts_since([a_run], written_at)
    assert True in order[:K], f"A's step was claim {order.index(True) + 1} of {len(order)}"


def test_backlog_in_flight__idle_owners_step__takes_the_next_freed_slot(engine):
    a, b = _owners()
    url = f"{engine.sim.base_url}/echo"
    with transaction.atomic():
        runs_submit_many(_specs(b, BACKLOG, url))
    # B's backlog is being worked through: its operation at the in-flight cap, most still Pending.
    wait_for(
        lambda: Step.objects.filter(owner_id=b.id, process_state="processed").count() >= 20,
        timeout=60,
        what="B's first steps done",
    )
    (a_run,) = runs_submit_many(_specs(a, 1, url))
    assert a_run is not None
    a_written = Run.objects.get(pk=a_run).created_at
    pending_b = Step.objects.filter(owner_id=b.id, process_state="pending").count()
    assert pending_b >= 100, "B's backlog drained before A came: the test proves nothing"

    wait_run(a_run, (Run.State.COMPLETED,), timeout=120)

    order = _attempts_since([a_run], a_written)
    assert True in order[:K], (
        f"A's step was claim {order.index(True) + 1} after it came due ({pending_b} of B's left)"
    )


def test_job_occurrence_not_started_in_time__supervisor_skips_it_with_a_history_row(
    engine,
):
    owner = get_user_model().objects.get_or_create(username="fair-live-s2s")[0]
    job = job_create(
        owner_id=owner.id,
        name="late",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="0 * * * *",
        by_staff=True,  # the engine's test workflow is staff-only work
    )
    with transaction.atomic():
        firing = job_run_now(job_id=job.id, by_staff=True)
        assert firing.run_id is not None
        # Its first step cannot be claimed (as behind a backlog) and its window has passed.
        first = Step.objects.filter(run_id=firing.run_id, seq=0)
        first.update(
            not_before=Now() + timedelta(hours=1),
            created_at=Now() - timedelta(seconds=300),
            expires_at=Now() - timedelta(seconds=1),
        )

    run = wait_run(firing.run_id, (Run.State.CANCELLED,), timeout=30)

    assert run.error.startswith("skipped: not started within ") and run.error.endswith(" s (backlog)")
    # The occurrence's history row is the dispatcher room's: its next settle closes it as skipped.
    row = wait_for(
        lambda: TaskExecutionHistory.objects.filter(
            job_id=job.id, kind="job", run_id=run.id, status="skipped"
        ).first(),
        timeout=30,
        what="the dispatcher's settle to close the occurrence's history row as skipped",
    )
    assert row.status == "skipped" and row.error == run.error and row.ended_at is not None
    assert set(run.steps.values_list("process_state", flat=True)) == {"cancelled"}

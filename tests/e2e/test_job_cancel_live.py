"""Deleting a job with real workers (issue 18): runs queued while the engine's workers are
stopped are cancelled and never reach the remote service when the workers come back; the run
that was already claimed - its agent frozen mid-call to a slow endpoint - finishes."""

from __future__ import annotations

import os
import signal
import time
import uuid

from agents.http_call import HTTP_CALL_WORKFLOW
from scheduler.models import Run, RunEvent, Step
from scheduler.services import job_create, job_delete, job_run_now

from .helpers import wait_run, wait_step_state


def test_delete__queued_runs_never_run__the_claimed_one_finishes(engine, demo_user):
    base = os.environ["SIMULATOR_URL"]
    job = job_create(
        by_staff=False,
        owner_id=demo_user.id,
        name=f"slow-{uuid.uuid4().hex[:6]}",
        workflow=HTTP_CALL_WORKFLOW,
        input={"method": "POST", "url": f"{base}/echo/slow?delay_ms=1500", "body": {"n": 1}},
        cron="0 * * * *",
        overlap_policy="allow_all",
    )
    claimed = job_run_now(by_staff=False, job_id=job.pk).run_id
    wait_step_state(claimed, "call", Step.State.PROCESSING)
    workers = (engine.control, engine.agents, engine.beat)
    for proc in workers:
        proc.kill(signal.SIGSTOP)  # the agent is frozen mid-call; nothing claims
    try:
        queued = [run_id for _ in range(3) if (run_id := job_run_now(by_staff=False, job_id=job.pk).run_id)]
        assert len(queued) == 3
        assert set(Run.objects.filter(pk__in=queued).values_list("state", flat=True)) == {Run.State.PENDING}

        job_delete(job_id=job.pk, actor="user alice (web)")
    finally:
        for proc in workers:
            proc.kill(signal.SIGCONT)

    finished = wait_run(claimed, (Run.State.COMPLETED,), timeout=60)
    time.sleep(2)  # the scheduler's kicks and ticks had their chance to claim anything left
    assert finished.job_id is None  # unlinked from the deleted job, finished on its own
    for run in Run.objects.filter(pk__in=queued):
        assert run.state == Run.State.CANCELLED and run.error == "job deleted by user alice (web)"
        assert run.steps.get().attempts == 0
        assert RunEvent.objects.filter(run=run, type=RunEvent.Type.CANCELLED).exists()
        assert engine.sim.ledger(service="echo", key=f"{run.id}:call") == []
    assert len(engine.sim.ledger(service="echo", key=f"{claimed}:call")) == 1

"""A noisy neighbour on the http bulkhead (issue 26, docs/operating/fairness.md), with real workers: the
session's control worker and beat, the Procfile's agents-http worker (its production threads,
which are agent.http's default slots), PostgreSQL, Redis and the simulator's /echo.

Customer B floods agent.http at the customers' highest priority: 20 every-minute jobs whose
calls take 3 s, each also run now 8 times (160 calls of 3 s on 8 threads: a minute's work queued
at once). Customer A has one every-minute job, instant, at the same priority. Asserted, as
orders of events rather than wall times:
- A's two next occurrences both start (none skipped by A's overlap policy), and when A's call is
  sent, nothing of B's waits ahead of it in the broker: of B's calls claimed before A's, fewer
  than the bulkhead's slots start after A's (the claims not yet picked up by a free thread). On
  main, B's claims up to SAS_MAX_IN_FLIGHT (50) queue in the broker's first-in-first-out queue
  and start before A's;
- once B deletes its jobs, no run the deletion cancelled is claimed any more, only the runs it
  left (already claimed once: they finish on their own, `job_delete`) call after it, and B's calls
  stop within 30 s of it. On main, B's runs whose first attempt expired in the broker (queue
  timeout) were Running with their step Pending again: the delete left them, and they kept being
  claimed and called for minutes. (A claim the supervisor sends back unstarted - the threads busy
  past its start-by, under a loaded suite - still leaves its run "started": it is claimed again
  and finishes, within the 30 s.)
The figures at full scale (100 jobs of 20 s) are bench/noisy_neighbour.py's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from agents.http_call import HTTP_CALL_WORKFLOW
from sastools.harness import Proc, procfile_commands, procfile_process, wait_for
from scheduler.dispatcher.transitions import db_now
from scheduler.limits import CUSTOMER_PRIORITY_MAX
from scheduler.models import Job, Run, Step, TaskExecutionHistory
from scheduler.services import job_create, job_delete, job_run_now

from ..conftest import Engine

B_JOBS = 20
B_RUN_NOW = 8
# Under the tests' http.call step timeout (SAS_HTTP_JOB_STEP_TIMEOUT=5, tests/envsetup.py).
DELAY_MS = 3_000
SLOTS = 8  # the Procfile's agents-http threads: agent.http's default slots


@pytest.fixture
def http_agents(engine: Engine, tmp_path: Path) -> Iterator[Proc]:
    """The Procfile's agents-http worker instead of the session's agents worker."""
    assert f"-Q agent.http -P threads -c {SLOTS} " in procfile_commands()["agents-http"]
    engine.agents.stop()
    # The breaker (keyed by host: A and B call the same simulator) stays out of the way: a slow
    # machine's late call opening it would hold A's calls too, which is another finding's.
    env = {**engine.env, "SAS_BREAKER_FAILURE_THRESHOLD": "100000"}
    proc = procfile_process("agents-http", log_dir=tmp_path, env=env).start(ready_marker=" ready.")
    try:
        yield proc
    finally:
        proc.stop()
        engine.agents.start(ready_marker=" ready.")


def _at(entry: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(entry["at"])


def _calls(engine: Engine, run_ids: set[str], *, delay_ms: int) -> dict[str, datetime]:
    """Each call's start, by run id: the simulator writes its ledger entry as it answers, after
    the call's `delay_ms`."""
    starts: dict[str, datetime] = {}
    for entry in engine.sim.ledger(service="echo"):
        run_id = entry["key"].split(":")[0]
        if run_id in run_ids:
            starts[run_id] = _at(entry) - timedelta(milliseconds=delay_ms)
    return starts


def _claimed_at(run_ids: set[str]) -> dict[str, datetime]:
    rows = TaskExecutionHistory.objects.filter(kind="attempt", run_id__in=run_ids).order_by("started_at")
    first: dict[str, datetime] = {}
    for run_id, started_at in rows.values_list("run_id", "started_at"):
        first.setdefault(str(run_id), started_at)
    return first


def _job(owner: Any, name: str, url: str, overlap: str) -> Job:
    return job_create(
        owner_id=owner.id,
        by_staff=False,
        name=name,
        workflow=HTTP_CALL_WORKFLOW,
        input={"method": "POST", "url": url, "body": {"n": 1}},
        cron="* * * * *",
        priority=CUSTOMER_PRIORITY_MAX,
        overlap_policy=overlap,
    )


def test_flood_of_slow_calls__other_customers_job_starts_at_once_and_the_flood_stops_at_deletion(
    engine: Engine, http_agents: Proc
) -> None:
    users = get_user_model().objects
    a = users.get_or_create(username="noisy-live-a")[0]
    b = users.get_or_create(username="noisy-live-b")[0]
    base = os.environ["SIMULATOR_URL"]
    b_jobs = [_job(b, f"flood-{i}", f"{base}/echo?delay_ms={DELAY_MS}", "allow_all") for i in range(B_JOBS)]
    for job in b_jobs * B_RUN_NOW:
        assert job_run_now(job_id=job.pk, by_staff=False).outcome == "started"
    a_job = _job(a, "mine", f"{base}/echo", "skip")

    # A's next two occurrences (B's jobs fire with them: 20 more calls each minute).
    def a_runs() -> list[Run]:
        return list(Run.objects.filter(job=a_job, state=Run.State.COMPLETED).order_by("scheduled_for"))

    wait_for(lambda: len(a_runs()) >= 2, timeout=150, what="A's two occurrences to complete")
    skipped = TaskExecutionHistory.objects.filter(job_id=a_job.pk, kind="job", status="skipped").count()
    assert skipped == 0 and Run.objects.filter(job=a_job).count() == 2

    b_runs = {str(r) for r in Run.objects.filter(owner=b).values_list("id", flat=True)}
    for a_run in a_runs():
        a_claim = _claimed_at({str(a_run.id)})[str(a_run.id)]
        a_start = _calls(engine, {str(a_run.id)}, delay_ms=0)[str(a_run.id)]
        b_claims = _claimed_at(b_runs)
        b_starts = _calls(engine, b_runs, delay_ms=DELAY_MS)
        ahead = [r for r, at in b_claims.items() if at < a_claim and r in b_starts and b_starts[r] > a_start]
        # Claimed before A's and started after it: sent but not yet taken by a thread when A's
        # call was - at most the claims a free thread had not picked up yet, fewer than the slots.
        assert len(ahead) < SLOTS, f"{len(ahead)} of B's calls claimed before A's started after it"
    assert Step.objects.filter(owner_id=b.id, process_state=Step.State.PROCESSING).count() <= SLOTS

    # B deletes its jobs.
    for job in b_jobs:
        job_delete(job_id=job.pk, actor="customer b")
    deleted = db_now()
    processing = Step.objects.filter(owner_id=b.id, process_state=Step.State.PROCESSING)
    in_flight = {str(r) for r in processing.values_list("run_id", flat=True)}
    wait_for(
        lambda: not Step.objects.filter(owner_id=b.id, process_state__in=("pending", "processing")).exists(),
        timeout=120,
        what="B's steps to be done or cancelled",
    )
    time.sleep(2)  # a call sent at the last moment reaches the simulator

    # The deletion cancels the runs no step of which was ever claimed; a run already started
    # finishes on its own (scheduler/services/jobs.py `job_delete`) - one whose claim was sent
    # back unstarted (the bulkhead's threads busy past its start-by) is claimed again. So: no
    # cancelled run makes an attempt after the deletion, only the runs it left call after it,
    # and B's calls stop within 30 s of it (issue 26's target).
    left = {
        str(r)
        for r in Run.objects.filter(owner=b).exclude(state=Run.State.CANCELLED).values_list("id", flat=True)
    }
    later = TaskExecutionHistory.objects.filter(
        kind="attempt", run_id__in=b_runs - left, started_at__gt=deleted
    )
    assert not later.exists(), f"{later.count()} of B's cancelled runs claimed after the deletion"
    calls = _calls(engine, b_runs, delay_ms=DELAY_MS)
    after = {r for r, at in calls.items() if at > deleted}
    assert after <= left and len(in_flight) <= SLOTS, (len(after), len(left), len(in_flight))
    assert all(at <= deleted + timedelta(seconds=30) for at in calls.values()), "B called 30 s after"

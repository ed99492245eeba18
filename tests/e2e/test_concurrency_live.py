"""Two schedulers and two supervisors in separate processes, at the same time, on one table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from datetime import UTC, datetime

import pytest
from django.db.models import Count

from sastools.harness import REPO
from scheduler.models import Step, TaskExecutionHistory
from scheduler.services import run_submit

RUNS = 200


@contextmanager
def paused(*procs):
    """SIGSTOP the session's beat and control worker so only the racers touch the rows."""
    for proc in procs:
        if proc.alive():
            os.killpg(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for proc in procs:
            if proc.alive():
                os.killpg(proc.pid, signal.SIGCONT)


def race(mode: str, env: dict[str, str]) -> list[dict]:
    # The race is of the claim's locking, not of the bulkheads' slots (issue 26: a claim takes
    # only a queue's free slots, a customer a share of them): every step may be claimed here.
    env = {**env, "SAS_BULKHEAD_SLOTS": f"agent.inventory={RUNS * 10}", "SAS_BULKHEAD_OWNER_SHARE": "1"}
    start_at = time.time() + 2.0
    barrier = tempfile.mkdtemp(prefix=f"race-{mode}-")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.e2e.race_worker",
                mode,
                "--name",
                name,
                "--start-at",
                str(start_at),
                "--barrier",
                barrier,
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in (f"{mode}-A", f"{mode}-B")
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


@pytest.fixture
def quiet_engine(engine):
    with paused(engine.beat, engine.control):
        yield engine


@pytest.mark.both_brokers
def test_two_schedulers_and_two_supervisors__each_step_claimed_once_and_counted_once(quiet_engine, demo_user):
    for i in range(RUNS):
        run_submit(
            workflow="order_fulfilment",
            input={"items": [{"sku": f"S{i}", "quantity": 1}], "amount": "1.00", "currency": "EUR"},
            owner_id=demo_user.id,
            kick=False,
        )
    pending = set(Step.objects.filter(process_state=Step.State.PENDING).values_list("id", flat=True))
    assert len(pending) == RUNS

    claims = race("claim", quiet_engine.env)

    claimed = [sid for r in claims for sid in r["ids"]]
    assert all(r["ids"] for r in claims), "both schedulers must have claimed something"
    assert sorted(claimed) == sorted(pending)  # every step claimed, none twice
    assert Counter(claimed).most_common(1)[0][1] == 1
    per_step = TaskExecutionHistory.objects.filter(kind="attempt").values("step").annotate(n=Count("id"))
    assert {row["n"] for row in per_step} == {1}
    owners = Counter(Step.objects.filter(id__in=pending).values_list("locked_by", flat=True))
    assert set(owners) == {"claim-A", "claim-B"}

    # Every claimed attempt is now overdue, and no agent ever started it (the messages were not
    # sent): each is sent again - once - with no failure counted.
    Step.objects.filter(id__in=pending).update(
        start_by=datetime(2000, 1, 1, tzinfo=UTC), complete_by=datetime(2000, 1, 1, tzinfo=UTC)
    )
    sweeps = race("sweep", quiet_engine.env)

    decided = [sid for r in sweeps for sid in r["ids"]]
    assert all(r["ids"] for r in sweeps), "both supervisors must have swept something"
    assert sorted(decided) == sorted(pending)
    steps = Step.objects.filter(id__in=pending)
    assert set(steps.values_list("failure_count", flat=True)) == {0}
    assert set(steps.values_list("process_state", flat=True)) == {Step.State.PENDING}
    attempts = TaskExecutionHistory.objects.filter(kind="attempt", step__in=pending)
    assert set(attempts.values_list("status", flat=True)) == {"requeued"}
    decisions = TaskExecutionHistory.objects.filter(kind="supervisor").values("step").annotate(n=Count("id"))
    assert len(decisions) == RUNS and {row["n"] for row in decisions} == {1}

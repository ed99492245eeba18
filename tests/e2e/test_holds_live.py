"""Concurrency keys and pauses (issue 30, scheduler/holds.md) with real workers: the session's
control worker (claims, the supervisor's sweep every second), its agents worker (4 processes,
agent.http among its queues), beat, PostgreSQL, Redis and the simulator's /echo.

Durations: the test profile's short windows (sastools/profile.py: an http.call attempt's window
is 5 s, the sweep runs every 1 s, backoffs 0.2-1 s). The issue asks that a paused customer's
in-flight steps be neither retried nor compensated for 5 minutes; with production's windows
(30 s a call, SAS_HTTP_JOB_STEP_TIMEOUT) that is ten deadlines. Here the pause lasts 50 s: ten of
the test profile's 5 s windows pass, each one a retry or, at the third, an error and compensation
for a step that was not paused.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from itertools import pairwise
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection

from agents.http_call import HTTP_CALL_WORKFLOW
from sastools.harness import wait_for
from scheduler.dispatcher.transitions import db_now
from scheduler.models import Run, Step, TaskExecutionHistory
from scheduler.services import pause_create, pause_resume, run_submit

from ..conftest import Engine

TRIGGERS = 20
DELAY_MS = 400


def _call(user: Any, *, delay_ms: int, key: str | None = None, limit: int = 1) -> Run:
    base = os.environ["SIMULATOR_URL"]
    data: dict[str, Any] = {"method": "POST", "url": f"{base}/echo?delay_ms={delay_ms}", "body": {"n": 1}}
    if key is not None:
        data["concurrency"] = {"key": key, "limit": limit}
    try:
        return run_submit(workflow=HTTP_CALL_WORKFLOW, input=data, owner_id=user.id)
    finally:
        connection.close()  # each submitting thread's own connection


def _attempts(runs: list[Run]) -> list[TaskExecutionHistory]:
    return list(
        TaskExecutionHistory.objects.filter(run_id__in=[r.id for r in runs], kind="attempt").order_by(
            "started_at"
        )
    )


def test_key_limit_1__20_triggers_at_once__never_two_at_once__other_owners_key_unaffected(
    engine: Engine,
) -> None:
    users = get_user_model().objects
    a = users.get_or_create(username="holds-live-a")[0]
    b = users.get_or_create(username="holds-live-b")[0]

    with ThreadPoolExecutor(max_workers=TRIGGERS) as pool:
        a_runs = list(pool.map(lambda _: _call(a, delay_ms=DELAY_MS, key="acct-1"), range(TRIGGERS)))
    all_written = db_now()
    b_runs = [_call(b, delay_ms=DELAY_MS, key="acct-1") for _ in range(3)]

    done = (Run.State.COMPLETED,)
    wait_for(
        lambda: (
            Run.objects.filter(id__in=[r.id for r in a_runs + b_runs], state__in=done).count() == TRIGGERS + 3
        ),
        timeout=120,
        what="every run to complete",
    )
    attempts = _attempts(a_runs)
    assert len(attempts) == TRIGGERS  # one attempt each: nothing timed out
    # Never two of A's key at once: each attempt starts when (or after) the one before ended.
    for before, after in pairwise(attempts):
        assert after.started_at >= before.ended_at, (before.run_id, after.run_id)
    # FIFO: the runs waiting once every submit had returned started in the order they were
    # written. (Before that, twenty submits commit in any order: a run written first but committed
    # after a slot was given is not yet a waiter, and the slot goes to one that is.)
    a_rows = Run.objects.filter(id__in=[r.id for r in a_runs])
    waited = {r.id: r.created_at for r in a_rows if r.admitted_at > all_written}
    assert len(waited) >= TRIGGERS // 2  # most of them waited: 20 calls of 400 ms one at a time
    in_order = [waited[h.run_id] for h in attempts if h.run_id in waited]
    assert in_order == sorted(waited.values())
    # B's key of the same name is B's own: B's runs started before A's queue was through.
    b_attempts = _attempts(b_runs)
    assert b_attempts[0].started_at < attempts[-1].started_at
    assert Run.objects.filter(id__in=[r.id for r in a_runs], admitted_at__isnull=True).count() == 0


def test_paused_customer__in_flight_steps_not_retried_nor_compensated__resumed_and_finished(
    engine: Engine,
) -> None:
    users = get_user_model().objects
    a = users.get_or_create(username="holds-live-paused")[0]
    b = users.get_or_create(username="holds-live-other")[0]
    # Two of A's calls in flight for long (3 s), eight more behind them on a key of limit 2.
    a_runs = [_call(a, delay_ms=3_000, key="acct-p", limit=2) for _ in range(10)]
    wait_for(
        lambda: Step.objects.filter(run__in=a_runs, process_state="processing").count() == 2,
        timeout=30,
        what="A's two calls in flight",
    )
    # The agents worker dies with them: nothing will ever reply for those two attempts.
    engine.agents.kill(signal.SIGKILL)
    pause = pause_create(owner_id=a.id, reason="invoice unpaid", by="admin:test")
    paused_at = db_now()
    engine.agents.start(ready_marker=" ready.", timeout=120)  # a loaded machine boots it slowly
    b_runs = [_call(b, delay_ms=100) for _ in range(5)]
    time.sleep(50)  # ten of the test profile's 5 s call windows (see the module's docstring)

    # Neither retried nor compensated: no attempt of A's ended by the supervisor, none started
    # since the pause (the first second: a claim that raced it), no run of A's undoing or failed.
    history = TaskExecutionHistory.objects.filter(run_id__in=[r.id for r in a_runs])
    assert not history.filter(status__in=["timed_out", "requeued", "retry_scheduled", "errored"]).exists()
    assert not history.filter(kind="attempt", started_at__gt=paused_at + timedelta(seconds=1)).exists()
    assert Step.objects.filter(run__in=a_runs, process_state="processing").count() == 2
    assert (
        not Run.objects.filter(id__in=[r.id for r in a_runs])
        .exclude(state__in=["pending", "running"])
        .exists()
    )
    assert not Step.objects.filter(run__in=a_runs, kind="compensation").exists()
    # Another customer ran meanwhile.
    assert Run.objects.filter(id__in=[r.id for r in b_runs], state="completed").count() == 5

    released = pause_resume(pause_id=pause.id)
    assert released.paused_seconds >= 50
    wait_for(
        lambda: Run.objects.filter(id__in=[r.id for r in a_runs], state="completed").count() == 10,
        timeout=150,
        what="A's ten runs to complete after the resume",
    )
    # The two killed attempts were judged after the resume - timed out, or sent again unstarted
    # when the kill came before their agent started them - then succeeded.
    judged = TaskExecutionHistory.objects.filter(
        run_id__in=[r.id for r in a_runs], status__in=["timed_out", "requeued"]
    )
    assert judged.count() == 2
    assert all(h.ended_at >= paused_at + timedelta(seconds=50) for h in judged)

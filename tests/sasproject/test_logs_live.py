"""Logs of real processes (issue 19, sasproject/logs.py).

- Quiet when idle: a control worker (scheduler, supervisor, jobs queues) and celery beat, with
  the 1-second sweep, tick and dispatcher running and nothing to do, write no line at all.
- LOG_FORMAT=json: every line a worker writes is one JSON object, and a run is followed across
  processes - the process that submitted it and the worker that ran its steps - by its run id,
  each state change with its step, lease, attempt, worker and event.

These processes use a Redis key prefix of their own, so the session's engine (if another test
file started it) neither takes their tasks nor sends them its sweeps.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from sasproject.logs import QUIET_TASKS
from sastools.harness import (
    AGENT_QUEUES,
    CONTROL_QUEUES,
    REPO,
    Proc,
    celery_beat,
    celery_worker,
    simulator_process,
    wait_for,
)
from scheduler.models import Run

IDLE_SECONDS = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_env(live_db: None, worker_env: dict[str, str]) -> dict[str, str]:
    port = _free_port()
    return {
        **worker_env,
        "SAS_REDIS_PREFIX": f"{worker_env['SAS_REDIS_PREFIX']}logs:",
        "SIMULATOR_URL": f"http://127.0.0.1:{port}",
        "SAS_HTTP_JOB_ALLOWED_HOSTS": f"127.0.0.1:{port}",
        "SAS_HTTP_JOB_PRIVATE_HOSTS": f"127.0.0.1:{port}",
    }


@pytest.fixture
def started(request: pytest.FixtureRequest) -> Iterator[list[Proc]]:
    procs: list[Proc] = []
    yield procs
    for proc in reversed(procs):
        proc.stop()


def _lines(proc: Proc, offset: int = 0) -> list[str]:
    return [line for line in proc.log()[offset:].splitlines() if line.strip()]


def _tasks_run(env: dict[str, str], node: str) -> dict[str, int]:
    """How many tasks of each name the worker has run (Celery's `inspect stats`)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "sasproject",
            "inspect",
            "stats",
            "-d",
            node,
            "--json",
            "--timeout",
            "10",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    stats: dict[str, Any] = json.loads(result.stdout)[node]
    return dict(stats["total"])


def test_idle__worker_and_beat_with_the_periodic_tasks_running__write_nothing(
    own_env: dict[str, str], started: list[Proc], tmp_path: Path
) -> None:
    control = celery_worker(
        name="idle-control", queues=CONTROL_QUEUES, log_dir=tmp_path, env=own_env, concurrency=1
    )
    beat = celery_beat(log_dir=tmp_path, env=own_env)
    started += [control, beat]
    control.start(ready_marker=" ready.")
    beat.start(ready_marker="beat: Starting")
    node = f"idle-control@{socket.gethostname()}"
    wait_for(
        lambda: _tasks_run(own_env, node).get("supervisor.sweep", 0) > 0, timeout=30, what="a first sweep"
    )
    before = _tasks_run(own_env, node)
    offsets = {proc.name: len(proc.log()) for proc in (control, beat)}

    time.sleep(IDLE_SECONDS)

    written = {proc.name: _lines(proc, offsets[proc.name]) for proc in (control, beat)}
    after = _tasks_run(own_env, node)
    assert control.alive() and beat.alive()
    # Not an idle beat: the sweep, the tick and the dispatcher ran all along (every 1 s here; the
    # alert evaluator every SAS_ALERTS_INTERVAL, 5 s)...
    ran = {name: after.get(name, 0) - before.get(name, 0) for name in sorted(QUIET_TASKS)}
    every = {
        "alerting.evaluate": settings.SAS["ALERTS_INTERVAL"],
        # hourly: not expected within the window (issue 29's storage maintenance)
        "ops.storage_maintain": settings.SAS["STORAGE_INTERVAL"],
    }
    assert all(count >= IDLE_SECONDS // (3 * every.get(name, 1)) for name, count in ran.items()), ran
    # ...and wrote nothing, in the worker or in beat (~455 lines a minute before issue 19).
    assert written == {"idle-control": [], "beat": []}, written


def _submit_order_in_a_process(env: dict[str, str], user_id: int) -> tuple[str, list[str]]:
    """Submits an order from a process of its own (as the web does), with LOG_FORMAT=json.
    Returns the run id and that process's log lines."""
    code = (
        "import django, sys; django.setup()\n"
        "from orders.services import order_submit\n"
        f"order = order_submit(owner_id={user_id}, data={{'items': [{{'sku': 'SKU-LOG', 'quantity': 1}}], "
        "'amount': '9.99', 'currency': 'EUR'})\n"
        "print('RUN', order.run_id, flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    run_id = result.stdout.split()[-1]
    return run_id, [line for line in result.stderr.splitlines() if line.strip()]


def test_json__a_run_followed_by_its_id_across_processes(
    own_env: dict[str, str], started: list[Proc], tmp_path: Path, demo_user: Any
) -> None:
    env = {**own_env, "LOG_FORMAT": "json"}
    sim = simulator_process(url=env["SIMULATOR_URL"], log_dir=tmp_path, env=env)
    worker = celery_worker(
        name="json-worker",
        queues=f"{CONTROL_QUEUES},{AGENT_QUEUES}",
        log_dir=tmp_path,
        env=env,
        concurrency=2,
    )
    started += [sim, worker]
    sim.start(ready_marker="SIMULATOR_LISTENING")
    worker.start(ready_marker=" ready.")

    run_id, submitter = _submit_order_in_a_process(env, demo_user.pk)
    wait_for(
        lambda: Run.objects.get(pk=run_id).state == Run.State.COMPLETED,
        timeout=30,
        what="the run to complete",
    )
    wait_for(lambda: run_id in worker.log(), timeout=5, what="the worker to log the run")

    lines = [json.loads(line) for line in _lines(worker)]  # every line is JSON, or this raises
    assert all({"ts", "level", "logger", "message", "worker"} <= set(line) for line in lines)
    assert any(line["message"].endswith(" ready.") for line in lines)
    submitted = [json.loads(line) for line in submitter]
    mine = [line for line in submitted + lines if line.get("run") == run_id]
    events = [line["event"] for line in mine]
    # Received in the submitting process; each of the three steps dispatched (or run in place)
    # and succeeded in the worker.
    assert events.count("run_received") == 1
    assert events.count("step_succeeded") == 3, events
    assert events.count("step_dispatched") + events.count("step_kept") == 3, events
    by_process = {line["worker"] for line in mine}
    assert len(by_process) == 2 and any(w.startswith("json-worker@") for w in by_process), by_process
    steps = {line["step"] for line in mine if line["event"] == "step_succeeded"}
    for line in mine:
        if line["event"] in ("step_dispatched", "step_kept", "step_succeeded"):
            assert line["step"] in steps and line["lease"] and line["attempt"] == 1, line

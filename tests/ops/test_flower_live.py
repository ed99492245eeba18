"""Flower with real processes (issue 19): it asks for a login; it shows an agent task whose
attempt failed (refused like a declined card, or a 503 of an outage) as FAILURE with the reason
while the engine handles the run as before; it keeps the periodic engine tasks out of its task
list; its broker page lists the engine's queues."""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.models import Run, TaskExecutionHistory

from ..admin.test_admin_browser import _free_port
from ..e2e.helpers import submit_order, wait_run
from ..harness import Proc, wait_for

LOGIN = "ops:flower-test-password"
# Where the agent worker's log stood when this test's Flower started.
_OFFSETS: dict[int, int] = {}


def flower_log_offset(engine: Any) -> int:
    return _OFFSETS.get(id(engine), 0)


def _get(url: str, *, auth: str | None = LOGIN) -> tuple[int, bytes]:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture
def flower(engine: Any, tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "sasproject",
        "flower",
        "--address=127.0.0.1",
        f"--port={port}",
        f"--basic_auth={LOGIN}",
    ]
    proc = Proc(name="flower", args=args, log_path=tmp_path / "flower.log", env=engine.env)
    _OFFSETS[id(engine)] = len(engine.agents.log())
    proc.start(ready_marker="Visit me at")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            lambda: _get(f"{base}/healthcheck", auth=None)[0] == 200, timeout=30, what="Flower to answer"
        )
        yield base
    finally:
        proc.stop()


def test_flower__login_failed_attempts_periodic_tasks_and_queues(
    flower: str, engine: Any, demo_user: Any
) -> None:
    # No login, a wrong one: refused.
    assert _get(f"{flower}/api/tasks", auth=None)[0] == 401
    assert _get(f"{flower}/api/tasks", auth="ops:wrong")[0] == 401
    assert _get(f"{flower}/", auth=None)[0] == 401
    # Flower turns the workers' task events on while it watches (every few seconds; they are
    # off by default, settings.CELERY_WORKER_SEND_TASK_EVENTS): wait until the agent worker says so.
    wait_for(
        lambda: (
            "Events of group {task} enabled by remote" in engine.agents.log()[flower_log_offset(engine) :]
        ),
        timeout=30,
        what="Flower to enable the agent worker's task events",
    )
    wait_for(
        lambda: b"agents@" in _get(f"{flower}/api/workers?refresh=1")[1],
        timeout=30,
        what="Flower to see workers",
    )

    # The first step's agent task comes through the broker (later steps may run in place in
    # the session's one agent worker, inside the task of the step before; agents/eager.py).
    # A refusal (4xx, like a declined card) and an outage's 503s.
    engine.sim.set_faults("inventory", permanent_rate=1.0)
    refused = submit_order(demo_user)
    refused_run = wait_run(refused.run_id, (Run.State.COMPENSATED,))
    engine.sim.set_faults("inventory", permanent_rate=0.0, transient_rate=1.0)
    outage = submit_order(demo_user)
    wait_for(
        lambda: TaskExecutionHistory.objects.filter(run_id=outage.run_id, status="failed_transient").exists(),
        timeout=30,
        what="an attempt failed by the outage",
    )
    engine.sim.set_faults("inventory", transient_rate=0.0)
    outage_run = wait_run(outage.run_id, (Run.State.COMPLETED,), timeout=60)

    # The engine's semantics are unchanged: each failure recorded once, as before.
    def attempts(run: Run) -> list[str]:
        rows = TaskExecutionHistory.objects.filter(run=run, kind="attempt", step__name="reserve_inventory")
        return list(rows.order_by("id").values_list("status", flat=True))

    assert attempts(refused_run) == ["failed_permanent"]
    assert attempts(outage_run)[0] == "failed_transient" and attempts(outage_run)[-1] == "succeeded"

    def reserve_tasks(run: Run) -> list[dict[str, Any]]:
        step_id = run.steps.get(name="reserve_inventory").pk
        status, body = _get(f"{flower}/api/tasks?taskname=agents.inventory.reserve")
        assert status == 200
        found = [t for t in json.loads(body).values() if f"'step_id': {step_id}," in (t["kwargs"] or "")]
        return sorted(found, key=lambda t: t["received"] or 0)

    def ended(run: Run, count: int) -> list[dict[str, Any]] | None:
        tasks = reserve_tasks(run)
        done = [t for t in tasks if t["state"] in ("FAILURE", "SUCCESS")]
        return done if len(done) >= count else None

    (task,) = wait_for(lambda: ended(refused_run, 1), timeout=30, what="Flower to show the refused task")
    assert task["state"] == "FAILURE", task
    assert "AttemptFailed" in task["exception"] and "permanent" in task["exception"], task["exception"]
    assert "refused" in task["exception"], task["exception"]
    assert task["retries"] == 0  # delivered once: no Celery retry, no redelivery

    tasks = wait_for(lambda: ended(outage_run, 2), timeout=30, what="Flower to show the outage's tasks")
    assert tasks[0]["state"] == "FAILURE" and "transient" in tasks[0]["exception"], tasks[0]
    assert "503" in tasks[0]["exception"], tasks[0]["exception"]
    assert tasks[-1]["state"] == "SUCCESS", tasks[-1]
    assert len(tasks) == len(attempts(outage_run))  # one task per attempt, none delivered twice

    # The 1-second periodic tasks ran meanwhile but send no task events: not in Flower's list.
    for name in ("supervisor.sweep", "scheduler.tick"):
        status, body = _get(f"{flower}/api/tasks?taskname={name}")
        assert status == 200 and json.loads(body) == {}, name

    # The broker page lists the engine's queues (under the test's Redis key prefix).
    status, body = _get(f"{flower}/broker")
    assert status == 200
    page = body.decode()
    for queue in ("agent.payment", "agent.shipping", "scheduler", "supervisor"):
        assert f">{queue}<" in page or f'"{queue}"' in page or queue in page, queue

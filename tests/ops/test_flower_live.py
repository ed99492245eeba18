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

from sastools.harness import Proc, wait_for
from scheduler.models import Run, TaskExecutionHistory

from ..admin.test_admin_browser import _free_port
from ..e2e.helpers import submit_order, wait_run

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
    # As the Procfile and compose run it: read-only (issue 26, sasproject/flower_readonly.py).
    args = [
        sys.executable,
        "-m",
        "sasproject.flower_readonly",
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


def test_flower__long_steps_failed_attempts_shown_failed(
    flower: str, engine: Any, demo_user: Any, start_worker: Any
) -> None:
    """The long steps' agents (agents/long.py) end their tasks as the short ones do: a reprice
    page whose statement fails (a numeric overflow: a transient fault, retried) and an export
    refused for good show as FAILURE with the reason; a page done ("continue") and the last
    page as SUCCESS; one task per attempt, as the run's history has them."""
    from django.contrib.auth import get_user_model
    from django.db import connection

    from catalogue.services import catalogue_seed, reprice_submit
    from exports.models import Export
    from scheduler.services import run_submit

    worker = start_worker(name="long-flower", queues="agent.catalogue,agent.exports", concurrency=1)
    wait_for(
        lambda: "Events of group {task} enabled by remote" in worker.log(),
        timeout=30,
        what="Flower to enable the long worker's task events",
    )

    def clean_catalogue() -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE catalogue_product, catalogue_repriceledger RESTART IDENTITY")

    victim, _ = get_user_model().objects.get_or_create(username="flower-victim")
    ops, _ = get_user_model().objects.get_or_create(username="flower-ops", defaults={"is_staff": True})
    clean_catalogue()
    try:
        # 1,001 products: the first page (1,000) is done, the second holds the one product whose
        # price cannot grow by 10% (numeric(14, 2)): its statement fails, every attempt.
        catalogue_seed(rows=1001)
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE catalogue_product SET price = 999999999999.99"
                " WHERE id = (SELECT max(id) FROM catalogue_product)"
            )
        reprice = reprice_submit(owner_id=demo_user.id, by_staff=True, percent="10")
        # An export of another user's history: refused for good by the agent.
        theirs = Export.objects.create(owner=victim)
        export = run_submit(
            workflow="exports.history_csv", input={"export_id": str(theirs.pk)}, owner_id=ops.pk
        )
        reprice_run = wait_run(reprice.id, tuple(Run.TERMINAL_STATES), timeout=60)
        export_run = wait_run(export.id, tuple(Run.TERMINAL_STATES), timeout=60)

        def statuses(run: Run) -> list[str]:
            rows = TaskExecutionHistory.objects.filter(run=run, kind="attempt").order_by("id")
            return list(rows.values_list("status", flat=True))

        def flower_tasks(name: str, run: Run) -> dict[int, dict[str, Any]]:
            """The run's tasks that ended, by the attempt each one's request names."""
            step_id = run.steps.order_by("seq").first().pk
            status, body = _get(f"{flower}/api/tasks?taskname={name}")
            assert status == 200
            done: dict[int, dict[str, Any]] = {}
            for task in json.loads(body).values():
                kwargs = task["kwargs"] or ""
                if f"'step_id': {step_id}," in kwargs and task["state"] in ("FAILURE", "SUCCESS"):
                    attempt = int(kwargs.split("'attempt': ", 1)[1].split(",", 1)[0])
                    assert attempt not in done, (attempt, task)  # one task per attempt
                    done[attempt] = task
            return done

        # The reprice: page 1 done ("continued"), then the failing page's attempts (transient,
        # until the step's max_failures). Each attempt that came through the broker is one task,
        # named by its attempt (page 2's first attempt may run in place, inside page 1's task,
        # whose state is its own first attempt's: agents/eager.py).
        history = statuses(reprice_run)
        assert history[0] == "continued" and history.count("failed_transient") == 3, history
        tasks = wait_for(
            lambda: (t := flower_tasks("agents.catalogue.reprice", reprice_run)) and len(history) in t and t,
            timeout=30,
            what="Flower to show the reprice's last attempt",
        )
        assert tasks[1]["state"] == "SUCCESS", tasks[1]  # the page done: a "continue" reply
        assert len(tasks) >= 2, tasks
        for attempt, task in tasks.items():
            failed = history[attempt - 1] == "failed_transient"
            assert task["state"] == ("FAILURE" if failed else "SUCCESS"), (attempt, task, history)
            if failed:
                assert "AttemptFailed" in task["exception"] and "transient" in task["exception"], task
                assert "numeric field overflow" in task["exception"], task["exception"]

        # The export: refused once, shown failed with the reason.
        assert statuses(export_run) == ["failed_permanent"]
        task = wait_for(
            lambda: flower_tasks("agents.exports.history_csv", export_run).get(1),
            timeout=30,
            what="Flower to show the export's task",
        )
        assert task["state"] == "FAILURE", task
        assert "permanent" in task["exception"] and "not the run owner's" in task["exception"], task
    finally:
        clean_catalogue()
        Export.objects.filter(owner=victim).delete()

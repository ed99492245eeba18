"""A 400 MB answer leaves the worker's memory flat (issue 18): a real Celery worker subprocess
(solo pool, so the task runs in the process whose /proc/<pid>/status is read) delivers an
order's webhooks to a server that answers every POST with a 400 MB body, and runs an http.call
to one. Its peak RSS (VmHWM) before and after must differ by well under 16 MB. Bounded, not
timed. The session engine's agent worker is stopped (SIGSTOP) for the test so that this worker
takes every agent task."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from agents.http_call import HTTP_CALL_WORKFLOW
from orders.services import order_submit
from sastools.harness import AGENT_QUEUES, Proc, celery_worker, wait_for
from scheduler.models import Run
from scheduler.services import run_submit
from webhooks.models import WebhookDelivery

from ..agents.servers import HUGE, HostileServer, start_hostile_server
from ..conftest import Engine
from ..e2e.helpers import wait_run
from ..orders.conftest import ORDER, make_user
from .receiver import Receiver

GROWTH_LIMIT_KB = 16 * 1024


def _memory_kb(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of `pid`, in kB, from /proc/<pid>/status."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


@pytest.fixture
def huge_server() -> Iterator[HostileServer]:
    server = start_hostile_server("huge", size=HUGE)
    yield server
    server.stop()


@pytest.fixture
def lone_worker(engine: Engine, tmp_path: Path, huge_server: HostileServer) -> Iterator[Proc]:
    """The only agent worker while the test runs: solo pool, the test's egress settings."""
    sim_netloc = engine.sim.base_url.removeprefix("http://")
    proc = celery_worker(
        name="lone-agent",
        queues=AGENT_QUEUES,
        log_dir=tmp_path,
        env={
            **engine.env,
            "SAS_HTTP_JOB_ALLOWED_HOSTS": f"{sim_netloc}/echo,127.0.0.1:{huge_server.port}/big",
        },
        concurrency=1,
        pool="solo",
    )
    engine.agents.kill(signal.SIGSTOP)
    try:
        proc.start(ready_marker=" ready.")
        yield proc
    finally:
        proc.stop()
        engine.agents.kill(signal.SIGCONT)


def _deliveries_done(order_id: str, timeout: float = 60.0) -> list[WebhookDelivery]:
    def done() -> list[WebhookDelivery] | None:
        run = Run.objects.get(correlation_id=order_id, workflow="order_fulfilment")
        rows = list(WebhookDelivery.objects.filter(subscription__run=run).order_by("sequence"))
        finished = all(r.state in ("delivered", "given_up") for r in rows)
        return rows if run.is_terminal and rows and finished and len(rows) == run.events.count() else None

    return wait_for(done, timeout=timeout, what=f"the webhook deliveries of {order_id}")


def test_webhook_worker__400mb_callback_answers__memory_flat(
    lone_worker: Proc, huge_server: HostileServer, receiver: Receiver
) -> None:
    owner = make_user("mem")
    # Warm up: one order delivered to an ordinary receiver (imports, pools, first connections).
    warm = order_submit(owner_id=owner.id, data=ORDER, callback_url=receiver.url)
    assert {d.state for d in _deliveries_done(str(warm.pk))} == {"delivered"}
    before = _memory_kb(lone_worker.pid)

    order = order_submit(owner_id=owner.id, data=ORDER, callback_url=huge_server.url("/hooks"))
    deliveries = _deliveries_done(str(order.pk))

    after = _memory_kb(lone_worker.pid)
    # Each event answered with 400 MB and a 200: delivered, reading only the first bytes.
    assert len(deliveries) >= 4 and {d.state for d in deliveries} == {"delivered"}
    assert len(huge_server.paths) == len(deliveries)
    offered = HUGE * len(deliveries)
    assert huge_server.sent < offered / 20, (huge_server.sent, offered)
    growth = after["VmHWM"] - before["VmHWM"]
    print(
        f"webhook worker: before {before} kB, after {after} kB, peak growth {growth} kB, "
        f"{len(deliveries)} answers of 400 MB offered, {huge_server.sent} bytes sent"
    )
    assert growth < GROWTH_LIMIT_KB, (before, after)
    assert after["VmRSS"] - before["VmRSS"] < GROWTH_LIMIT_KB, (before, after)


def test_http_job_worker__400mb_answer__memory_flat(
    lone_worker: Proc, huge_server: HostileServer, settings: Any
) -> None:
    owner = make_user("memjob")
    sim = django_settings.SAS["REMOTE_URLS"]["payment"]
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [
        *settings.SAS_HTTP_JOB_ALLOWED_HOSTS,
        f"127.0.0.1:{huge_server.port}/big",
    ]
    warm = run_submit(
        workflow=HTTP_CALL_WORKFLOW, input={"method": "GET", "url": f"{sim}/echo"}, owner_id=owner.id
    )
    assert wait_run(warm.pk, ("completed", "compensated", "failed"), timeout=30).state == "completed"
    before = _memory_kb(lone_worker.pid)

    runs = [
        run_submit(
            workflow=HTTP_CALL_WORKFLOW,
            input={"method": "GET", "url": huge_server.url("/big")},
            owner_id=owner.id,
        )
        for _ in range(3)
    ]
    done = [wait_run(run.pk, ("completed", "compensated", "failed"), timeout=60) for run in runs]

    after = _memory_kb(lone_worker.pid)
    assert {run.state for run in done} == {"completed"}
    for run in done:
        result = run.steps.get().result
        assert result["body_truncated"] is True and len(result["body"]) == 4096
    assert huge_server.sent < HUGE * 3 / 20
    growth = after["VmHWM"] - before["VmHWM"]
    print(f"http.call worker: before {before} kB, after {after} kB, peak growth {growth} kB")
    assert growth < GROWTH_LIMIT_KB, (before, after)
    assert after["VmRSS"] - before["VmRSS"] < GROWTH_LIMIT_KB, (before, after)

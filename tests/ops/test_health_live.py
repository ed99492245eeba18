"""The engine-health page with real processes (issue 19): a queue with work whose only consumer
is frozen (SIGSTOP) shows red, in headless Chromium against the Procfile's web.

Before, the page stayed green for as long as the shipping worker was frozen: nothing showed a
queue without a live consumer."""

from __future__ import annotations

import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.conf import settings

from liveness.last_run import last_run_record
from liveness.queues import DEFAULT_SEP
from sastools.harness import procfile_process, wait_for

from ..admin.test_admin_browser import CHROMIUM, CHROMIUM_ARGS, _free_port

PASSWORD = "ops-health-password"
STALE = "3"


@pytest.fixture
def health_web(
    live_db: None, engine_paused: None, worker_env: dict[str, str], tmp_path: Path
) -> Iterator[str]:
    """The Procfile's web (DEBUG on for the admin's static files), counting a consumer gone after
    3 s without a heartbeat. The session engine, if started, is paused: only this test's worker
    consumes."""
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="ops-health", defaults={"is_staff": True})
    user.is_staff = user.is_superuser = True
    user.set_password(PASSWORD)
    user.save()
    port = _free_port()
    proc = procfile_process(
        "web",
        log_dir=tmp_path,
        env={**worker_env, "DJANGO_DEBUG": "1", "WEB_PORT": str(port), "SAS_CONSUMER_STALE": STALE},
    ).start(ready_marker="Booting worker")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/healthz", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            assert proc.alive(), proc.log()[-3000:]
            return False

    try:
        wait_for(up, timeout=30, interval=0.2, what="the web to answer")
        yield base
    finally:
        proc.stop()


def _clear_queue(redis_client: Any, name: str) -> None:
    prefix = settings.REDIS_PREFIX
    redis_client.delete(*[prefix + (f"{name}{DEFAULT_SEP}{p}" if p else name) for p in (0, 3, 6, 9)])


def test_health_page__queue_with_work_and_frozen_consumer__row_red(
    health_web: str, start_worker: Any, redis_client: Any, artifacts_dir: Path
) -> None:
    from playwright.sync_api import sync_playwright

    queue = "agent.shipping"
    _clear_queue(redis_client, queue)
    last_run_record(task="supervisor.sweep")
    worker = start_worker(name="shipping-frozen", queues=queue, concurrency=1, SAS_CONSUMER_HEARTBEAT="0.5")
    shots = artifacts_dir / "ops"
    shots.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(f"{health_web}/admin/login/?next=/admin/scheduler/run/health/")
            page.fill("#id_username", "ops-health")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            row = f'tr[data-queue="{queue}"]'

            def consumers() -> str:
                page.goto(f"{health_web}/admin/scheduler/run/health/")
                return page.inner_text(f"{row} td:nth-child(4)").strip()

            # The live worker: one consumer, nothing waiting, not red.
            wait_for(lambda: consumers() == "1", timeout=20, interval=0.3, what="the worker's heartbeat")
            assert page.get_attribute(row, "class") == ""
            assert "ago" in page.inner_text("td.sas-ran")  # the sweep's own record

            # Frozen: it stops reading and stops its heartbeat. Its pending BRPOP takes the first
            # message into its socket; the rest wait in the queue.
            worker.kill(signal.SIGSTOP)
            for _ in range(3):
                current_app.send_task(
                    "agents.shipping.create",
                    kwargs={},
                    queue=queue,
                    expires=time.time() + 30,
                    ignore_result=True,
                )
            wait_for(
                lambda: consumers() == "0", timeout=20, interval=0.5, what="the consumer to count as gone"
            )

            assert page.get_attribute(row, "class") == "sas-stalled"
            waiting = int(page.inner_text(f"{row} td:nth-child(2)"))
            assert waiting >= 2
            assert page.inner_text(f"{row} td:nth-child(3)").endswith(" s")  # the oldest message's age
            assert "work waits, no live consumer" in page.inner_text(row)
            color = page.eval_on_selector(f"{row} td", "td => getComputedStyle(td).backgroundColor")
            assert color == "rgb(253, 226, 225)"
            # Other queues, with no work, are not red even without consumers.
            assert page.get_attribute('tr[data-queue="agent.payment"]', "class") == ""
            page.screenshot(path=str(shots / "engine-health-stalled-queue.png"), full_page=True)
            browser.close()
    finally:
        worker.kill(signal.SIGCONT)
        worker.stop()
        _clear_queue(redis_client, queue)

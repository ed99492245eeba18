"""A real web server (the Procfile's gunicorn, a subprocess on the test database, like the workers)
and a headless Chromium driven by Playwright."""

from __future__ import annotations

import os
import socket
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sastools.harness import procfile_process, wait_for

CHROMIUM = os.environ.get("SAS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def web_server(worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The Procfile's web command (gunicorn, as `make run` serves it, DEBUG on so that it serves
    the static files too) on a free port."""
    port = _free_port()
    log_dir = tmp_path_factory.mktemp("web-logs")
    proc = procfile_process(
        "web", log_dir=log_dir, env={**worker_env, "DJANGO_DEBUG": "1", "WEB_PORT": str(port)}
    ).start(ready_marker="Booting worker")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"{base}/accounts/login/", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            assert proc.alive(), proc.log()[-3000:]
            return False

    try:
        wait_for(up, timeout=120, interval=0.2, what="the web to answer")  # a loaded shared machine
        yield base
    finally:
        proc.stop()


@contextmanager
def open_page(base_url: str) -> Iterator[Any]:
    """A fresh headless Chromium page. Playwright's sync API runs an asyncio loop in this thread
    while it is open, and Django refuses ORM calls then (SynchronousOnlyOperation): tests do
    their database work before and after this block, never inside it."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=base_url, viewport={"width": 1280, "height": 860})
            page = context.new_page()
            page.set_default_timeout(20_000)
            yield page
        finally:
            browser.close()

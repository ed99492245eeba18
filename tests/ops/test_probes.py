"""/healthz and /readyz for load balancers: in-process, and a real gunicorn pointed at a
database or a broker that is not there (a closed port)."""

from __future__ import annotations

import json
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from sastools.harness import Proc, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.django_db
def test_healthz_and_readyz__all_up__200() -> None:
    client = Client()
    assert client.get("/healthz").json() == {"status": "ok"}
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]
    assert client.post("/readyz").status_code == 405


@pytest.fixture
def web(worker_env: dict[str, str], tmp_path: Path) -> Any:
    """Start a gunicorn web (one process) with some variables changed; stopped at the end."""
    started: list[Proc] = []

    def start(**env: str) -> str:
        port = _free_port()
        args = [sys.executable, "-m", "gunicorn", "-c", "sasproject/gunicorn.conf.py", "sasproject.wsgi"]
        environment = {**worker_env, "WEB_PORT": str(port), "WEB_WORKERS": "1", "WEB_THREADS": "2", **env}
        proc = Proc(
            name=f"web{len(started)}", args=args, log_path=tmp_path / f"web{port}.log", env=environment
        )
        started.append(proc)
        proc.start(ready_marker="Booting worker")
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _get(f"{base}/healthz")[0] == 200, timeout=30, what="the web to answer /healthz")
        return base

    yield start
    for proc in started:
        proc.stop()


def test_readyz__database_on_a_closed_port__503_names_the_database(web: Any) -> None:
    closed = _free_port()
    base = web(DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed}/nothing", DATABASE_POOL_TIMEOUT="2")

    status, body = _get(f"{base}/readyz")

    assert status == 503
    assert body["status"] == "unavailable"
    assert any(reason.startswith("database unreachable") for reason in body["reasons"]), body
    assert _get(f"{base}/healthz") == (200, {"status": "ok"})  # alive all the same


def test_readyz__broker_on_a_closed_port__503_names_the_broker(web: Any) -> None:
    closed = _free_port()
    base = web(CELERY_BROKER_URL=f"redis://127.0.0.1:{closed}/0")

    status, body = _get(f"{base}/readyz")

    assert status == 503
    assert body["reasons"] == [body["reasons"][0]] and body["reasons"][0].startswith("broker unreachable"), (
        body
    )
    assert _get(f"{base}/healthz")[0] == 200


def test_readyz__rabbitmq_broker_on_a_closed_port__503(web: Any) -> None:
    closed = _free_port()
    base = web(CELERY_BROKER_URL=f"amqp://guest:guest@127.0.0.1:{closed}//")

    status, body = _get(f"{base}/readyz")

    assert status == 503
    assert body["reasons"][0].startswith("broker unreachable"), body

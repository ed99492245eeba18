"""Helpers shared by the simulator tests: start the real simulator process, make business calls."""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30.0

CHARGE = {"amount": "12.50", "currency": "EUR", "card": "tok_ok"}
RESERVE = {"items": [{"sku": "ABC", "quantity": 2}, {"sku": "XYZ", "quantity": 1}]}
SHIP = {"order_id": "ord-1", "items": [{"sku": "ABC", "quantity": 2}]}


@dataclasses.dataclass
class SimulatorProcess:
    process: subprocess.Popen[str]
    url: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            assert self.process.stdout is not None
            self.process.stdout.close()


def _read_line(stream: IO[str], timeout: float) -> str:
    """Read one line from ``stream``; '' on EOF or when nothing came within ``timeout``."""
    lines: list[str] = []

    def read() -> None:
        # A reader left waiting past ``timeout`` sees the stream closed under it when the
        # process is stopped: that ends it quietly, not as an unhandled thread exception
        # reported in whatever test runs then.
        with contextlib.suppress(ValueError, OSError):
            lines.append(stream.readline())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else ""


def start_simulator(
    stderr_path: Path, args: tuple[str, ...] = ("--port", "0"), env: dict[str, str] | None = None
) -> SimulatorProcess:
    """Start ``python -m simulator`` and wait for its LISTENING line (no sleeping, no polling)."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SIMULATOR_")}
    child_env.update(env or {})
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "simulator", "--host", "127.0.0.1", *args],
            cwd=REPO_ROOT,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    line = _read_line(process.stdout, STARTUP_TIMEOUT)
    if not line.startswith("SIMULATOR_LISTENING "):
        process.kill()
        process.wait()
        process.stdout.close()
        pytest.fail(f"simulator did not start: {line!r}\n{stderr_path.read_text()}")
    return SimulatorProcess(process, line.split()[1], stderr_path)


@dataclasses.dataclass
class Response:
    status: int
    body: dict[str, Any]
    headers: dict[str, str]


class Api:
    """Business calls with `http.client`, so connection errors and timeouts surface unwrapped."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.host = host
        self.port = int(port)

    def connect(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def post(
        self,
        path: str,
        body: object = None,
        *,
        key: str | None,
        raw: bytes | None = None,
        timeout: float = 10.0,
        conn: http.client.HTTPConnection | None = None,
    ) -> Response:
        data = raw if raw is not None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if key is not None:
            headers["Idempotency-Key"] = key
        own = conn is None
        connection = self.connect(timeout) if conn is None else conn
        try:
            connection.request("POST", path, data, headers)
            response = connection.getresponse()
            payload = response.read()
            return Response(response.status, json.loads(payload), dict(response.getheaders()))
        finally:
            if own:
                connection.close()

    def request(self, method: str, path: str, body: bytes | None = None) -> Response:
        connection = self.connect()
        try:
            connection.request(method, path, body)
            response = connection.getresponse()
            payload = response.read()
            return Response(response.status, json.loads(payload), dict(response.getheaders()))
        finally:
            connection.close()

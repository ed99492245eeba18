"""Real processes for tests: Celery workers, beat and the simulator, started as subprocesses
that a test can kill. Nothing here is a stand-in: they talk to the same PostgreSQL test database
and the same Redis as the test process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devservices.common import pid_alive

REPO = Path(__file__).resolve().parent.parent

# The session's control worker also runs the jobs dispatcher (its own `dispatcher` worker in
# the Procfile).
CONTROL_QUEUES = "scheduler,supervisor,jobs,default"
AGENT_QUEUES = "agent.inventory,agent.payment,agent.shipping,agent.webhook,agent.http,agent.tasks"


def wait_for(predicate: Callable[[], Any], *, timeout: float, interval: float = 0.05, what: str = "") -> Any:
    """Poll until `predicate()` is truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate} (last={last!r})")


@dataclass
class Proc:
    name: str
    args: list[str]
    log_path: Path
    env: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def start(self, *, ready_marker: str | None, timeout: float = 40.0) -> Proc:
        offset = len(self.log())
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                self.args,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: kill() takes the pool children too
            )
        if ready_marker:
            wait_for(
                lambda: (
                    ready_marker in self.log()[offset:] or self.popen is None or self.popen.poll() is not None
                ),
                timeout=timeout,
                what=f"{self.name} to print {ready_marker!r}",
            )
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.log()[-4000:]}")
        return self

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signal the whole process group (the Celery parent and its pool children)."""
        if self.popen is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=10)
        if sig == signal.SIGKILL:
            reap_group(self.popen.pid)

    def stop(self) -> None:
        if self.alive():
            self.kill(signal.SIGTERM)


def reap_group(group: int, *, timeout: float = 15.0) -> bool:
    """Until no process of the (killed) process group `group` is left, reaping those that are
    our children (a zombie still counts as alive to kill(pid, 0), so to a pidfile check). Members
    that are not our children (a Celery worker's pool, orphaned when its parent died) are reaped by
    their new parent; we wait for that, up to `timeout`. True if the group is gone."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-group, os.WNOHANG)[0]:
                pass
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def remove_stale_pidfile(path: Path) -> bool:
    """Remove the pidfile at `path` if the process it names no longer runs (dead or a zombie:
    Celery's own check counts a zombie as alive and refuses to start, exit 73). True if removed."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return False
    if text.isdigit() and pid_alive(int(text)):
        return False
    path.unlink(missing_ok=True)
    return True


def celery_worker(
    *,
    name: str,
    queues: str,
    log_dir: Path,
    env: dict[str, str],
    concurrency: int = 2,
    pool: str = "prefork",
    app: str = "sasproject",
) -> Proc:
    """A Celery worker of `app` (the project's; a bench may name a module of its own that
    wraps it, e.g. bench/agent_unchecked.py)."""
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        app,
        "worker",
        "-Q",
        queues,
        "-c",
        str(concurrency),
        "-P",
        pool,
        "-n",
        f"{name}@%h",
        "--without-mingle",
        "--without-gossip",
        "-l",
        "INFO",
    ]
    return Proc(name=name, args=args, log_path=log_dir / f"{name}.log", env=env)


def celery_beat(*, log_dir: Path, env: dict[str, str]) -> Proc:
    args = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "sasproject",
        "beat",
        "-l",
        "INFO",
        "--pidfile=",
    ]
    return Proc(name="beat", args=args, log_path=log_dir / "beat.log", env=env)


def simulator_process(*, url: str, log_dir: Path, env: dict[str, str]) -> Proc:
    port = url.rsplit(":", 1)[1]
    args = [sys.executable, "-m", "simulator", "--host", "127.0.0.1", "--port", port]
    return Proc(name="simulator", args=args, log_path=log_dir / "simulator.log", env=env)


PROCFILE = REPO / "Procfile"


def procfile_commands() -> dict[str, str]:
    """The Procfile's processes, name -> shell command, exactly as `make run` (honcho) reads them."""
    commands: dict[str, str] = {}
    for line in PROCFILE.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, command = line.partition(":")
        commands[name.strip()] = command.strip()
    return commands


def procfile_process(name: str, *, log_dir: Path, env: dict[str, str]) -> Proc:
    """One Procfile process, run by a shell as honcho does, with the virtualenv's bin first on
    PATH (the Makefile's export) so that `celery` and `gunicorn` are this interpreter's."""
    command = procfile_commands()[name]
    bin_dir = str(Path(sys.executable).parent)
    env = {**env, "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', os.environ.get('PATH', ''))}"}
    return Proc(name=name, args=shell_args(command), log_path=log_dir / f"{name}.log", env=env)


def shell_args(command: str) -> list[str]:
    """A Procfile command run by a shell that execs it (`exec env VAR=value program ...`): the
    program is then our child, not the shell's (dash forks for a command with variable
    assignments), so killing it and waiting for our child reaps the program itself. Killed as a
    grandchild it was a zombie of PID 1 for a while, and a restarted beat found its pidfile's
    process still "alive" and exited 73."""
    return ["/bin/sh", "-c", f"exec env {command}"]


@contextlib.contextmanager
def publishing_to(url: str, *, queue_type: str = "classic") -> Iterator[None]:
    """The test process's Celery app publishes to `url` (declaring queues of `queue_type`, as
    the workers there do): its AMQP helper (queues, producer pool) and its connection pool are
    dropped before and after, so each is made again from the configuration of the moment (kombu
    keeps one connection pool per URL, process-wide: they are not closed here)."""
    from celery import current_app
    from kombu import Exchange, Queue

    conf = current_app.conf
    names = ("broker_url", "task_default_queue_type", "task_create_missing_queue_type", "task_queues")
    before = {name: conf[name] for name in names}
    args = {"x-queue-type": queue_type} if queue_type != "classic" else None
    # Quorum queues sit behind topic exchanges (settings._celery_queues: native delayed delivery).
    kind = "topic" if queue_type == "quorum" else "direct"
    queues = [
        Queue(q.name, Exchange(q.exchange.name, type=kind), routing_key=q.routing_key, queue_arguments=args)
        for q in before["task_queues"] or ()
    ]

    def drop_cached() -> None:
        current_app.__dict__.pop("amqp", None)  # a cached_property
        current_app._pool = None  # type: ignore[attr-defined]

    drop_cached()
    conf.update(
        broker_url=url,
        task_default_queue_type=queue_type,
        task_create_missing_queue_type=queue_type,
        task_queues=queues or before["task_queues"],
    )
    try:
        yield
    finally:
        drop_cached()
        conf.update(before)

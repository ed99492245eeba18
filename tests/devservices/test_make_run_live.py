"""`make run` on a brand-new database, stopped with Ctrl-C, as a developer sees it in a terminal.

The real target in a pseudo-terminal (so Ctrl-C is the terminal's SIGINT to the whole foreground
process group, make included), on a database created for this test, a Redis key prefix and ports
of its own. Its output must read as a clean start and a clean stop: no "Error 130" from make, no
"none (already present)" about periodic tasks that the migration has just created.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings

from sastools.harness import REPO

pytestmark = pytest.mark.timeout(240)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _admin_dsn() -> dict[str, Any]:
    db = settings.DATABASES["default"]
    return {
        "host": db.get("HOST") or "127.0.0.1",
        "port": db.get("PORT") or 5432,
        "user": db.get("USER") or "postgres",
        "password": db.get("PASSWORD") or None,
        "dbname": "postgres",
        "autocommit": True,
    }


@pytest.fixture
def new_database(django_db_setup: Any) -> Iterator[str]:
    """The URL of a database that does not exist yet (`make run` creates it); dropped after."""
    name = f"sas_makerun_{os.getpid()}"
    dsn = _admin_dsn()
    with psycopg.connect(**dsn) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    password = f":{dsn['password']}" if dsn["password"] else ""
    yield f"postgres://{dsn['user']}{password}@{dsn['host']}:{dsn['port']}/{name}"
    with psycopg.connect(**dsn) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _read(fd: int, out: bytearray, *, until: bytes | None, timeout: float) -> bool:
    """Read the terminal into `out` until `until` shows up (True), EOF or `timeout` (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the terminal closed: every process has exited
                return False
            if not chunk:
                return False
            out.extend(chunk)
            if until is not None and until in out:
                return True
    return False


def test_make_run__new_database_then_ctrl_c__clean_start_and_clean_stop(new_database: str) -> None:
    web, flower, sim = _free_port(), _free_port(), _free_port()
    # As typed in a terminal: not a sub-make of `make test` (its MAKEFLAGS, MAKELEVEL, jobserver).
    outer = {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES"}
    env = {
        **{k: v for k, v in os.environ.items() if k not in outer},
        "DATABASE_URL": new_database,
        "SAS_REDIS_PREFIX": f"test{os.getpid()}makerun:",
        "WEB_PORT": str(web),
        "FLOWER_PORT": str(flower),
        "SIMULATOR_PORT": str(sim),
        "SIMULATOR_URL": f"http://127.0.0.1:{sim}",
    }
    # -o: never reinstall requirements from a test (the virtualenv may be shared).
    args = ["make", "--no-print-directory", "-o", ".venv/.installed", "run"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: make, in the pseudo-terminal's foreground process group
        os.chdir(REPO)
        os.execvpe("make", args, env)
    out = bytearray()
    try:
        up = _read(fd, out, until=b"sasproject is up", timeout=150)
        assert up, f"make run did not come up:\n{out.decode(errors='replace')[-4000:]}"
        os.write(fd, b"\x03")  # Ctrl-C, as typed
        _read(fd, out, until=None, timeout=60)
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)  # only if something is left of what this test started
        os.close(fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if an assertion above left it running
    text = out.decode(errors="replace")

    assert "Error 130" not in text and not re.search(r"make(\[\d+\])?: \*\*\*", text), text[-3000:]
    assert "stopped (Ctrl-C)" in text
    assert "periodic tasks in place: sas: supervisor sweep, sas: scheduler safety tick" in text
    assert "already present" not in text
    assert "login: flower / flower-demo" in text  # Flower asks for a login (issue 19)
    assert os.waitstatus_to_exitcode(status) in (0, -signal.SIGINT)  # what any Ctrl-C'd command does

"""`make run` reloads (issue 31, item 5): devservices/reload.py's Procfile runs each of the
project's Python processes under watchfiles. The transformed line, run by a shell as honcho
runs it, restarts its command when a .py file of a watched package changes, and not for a file
outside them; the repository's own Procfile keeps its environment words outside watchfiles."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from devservices.reload import procfile_reloading
from tests.test_sizes import ROOT

VENV_BIN = ROOT / ".venv" / "bin"


def _lines(proc: subprocess.Popen[str], count: int, timeout: float) -> list[str]:
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(seen) < count:
        line = proc.stdout.readline()
        if line:
            seen.append(line.strip())
        else:
            time.sleep(0.05)
    return seen


def test_reloading_line__a_changed_module_restarts_the_process(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    script = 'import os, time; print("pid", os.environ["MARK"], os.getpid()); time.sleep(60)'
    program = f"{sys.executable} -u -c {shlex.quote(script)}"
    text = procfile_reloading(f"control: MARK=on {program}\nsimulator: {program}\n", tmp_path)
    control, simulator = text.splitlines()
    assert simulator == f"simulator: {program}"  # not a process of the project's code
    assert control.startswith("control: MARK=on watchfiles --filter python")
    command = control.partition(": ")[2]
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}"}
    proc = subprocess.Popen(
        ["sh", "-c", command],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        first = _lines(proc, 1, 20)
        assert first and first[0].startswith("pid on "), first
        time.sleep(1)
        (tmp_path / "tests" / "test_x.py").write_text("x = 1\n")  # not watched: no restart
        assert _lines(proc, 1, 3) == []
        (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
        second = _lines(proc, 1, 20)
        assert second and second[0].startswith("pid on ") and second[0] != first[0], (first, second)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
        assert proc.stdout is not None
        proc.stdout.close()


def test_repository_procfile__every_worker_and_the_web_reload__tools_do_not() -> None:
    text = procfile_reloading((ROOT / "Procfile").read_text(), ROOT)
    commands = dict(line.split(": ", 1) for line in text.splitlines() if line and not line.startswith("#"))

    for name in ("web", "control", "dispatcher", "beat", "agents-payment", "agents-apps", "longjobs"):
        words = shlex.split(commands[name])
        assert "watchfiles" in words, name
        assert all("=" in w for w in words[: words.index("watchfiles")]), name
        assert "tests" not in words and "scheduler" in words, name
    for name in ("flower", "simulator", "urls"):
        assert "watchfiles" not in commands[name], name

"""The soak's own process handling (soak/stack.py) never fails a run: a beat killed with SIGKILL
and started again at once comes back. It used to exit 73 ("pidfile already exists"): the killed
beat, a grandchild of ours behind the Procfile's shell, was not yet reaped, and Celery's pidfile
check counts a zombie as alive (a 3-minute soak ended FAIL with every invariant holding)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sastools.harness import remove_stale_pidfile
from sastools.services import free_port
from soak.stack import READY, Stack, log_offset, stop_group, wait_ready


@pytest.fixture
def stack(worker_env: dict[str, str], tmp_path: Path) -> Stack:
    """The soak's stack on the test database, its broker a port nobody listens on: the beat starts
    (and takes its pidfile) but sends nothing another test's workers could receive."""
    env = {**worker_env, "CELERY_BROKER_URL": f"redis://127.0.0.1:{free_port()}/0"}
    return Stack(base=tmp_path, broker="redis", env=env, worker_env=env)


PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture
def slow_reaper() -> Iterator[None]:
    """The test process becomes the reaper of its descendants' orphans (Linux's child
    subreaper) and reaps none of them by itself: as a container whose first process is no init,
    or a busy machine whose PID 1 reaps late. An orphaned zombie then stays until we reap it."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, ctypes.get_errno()
    try:
        yield
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def test_a_killed_beat_restarted_at_once_comes_back(stack: Stack, slow_reaper: None) -> None:
    beat = stack.procs["beat"] = stack.process("beat")
    pidfile = stack.pidfile("beat")
    assert pidfile is not None
    try:
        beat.start(ready_marker=None)
        assert wait_ready(beat, READY["beat"], timeout=120), beat.log()[-3000:]
        # The beat is our child (the shell execs it): the pid in its pidfile is the one we wait on.
        assert int(pidfile.read_text()) == beat.pid
        for _ in range(2):
            offset = log_offset(beat)
            beat.kill(signal.SIGKILL)
            stack.restart("beat")  # no pause: the successor starts right after the kill
            came_back = wait_ready(beat, READY["beat"], timeout=120, offset=offset)
            assert came_back and beat.alive(), beat.log()[offset:][-3000:]
            assert int(pidfile.read_text()) == beat.pid
    finally:
        stop_group(beat)


def test_a_stale_pidfile_is_removed_a_live_one_kept(tmp_path: Path) -> None:
    """A pidfile naming a zombie (dead, not yet reaped) is stale; one naming a running process
    is not."""
    pidfile = tmp_path / "beat.pid"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # A zombie until reaped: poll the /proc state rather than wait() (which would reap it).
        deadline = time.monotonic() + 30
        while Path(f"/proc/{dead.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.05)
        pidfile.write_text(f"{running.pid}\n")
        assert not remove_stale_pidfile(pidfile)
        assert pidfile.exists()
        pidfile.write_text(f"{dead.pid}\n")
        assert remove_stale_pidfile(pidfile)
        assert not pidfile.exists()
        assert not remove_stale_pidfile(pidfile)
    finally:
        running.kill()
        running.wait()
        dead.wait()

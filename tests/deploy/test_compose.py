"""docker/compose.yml holds (issue 19): loopback-only ports, a healthcheck per service, Redis with
a password, workers that outlive a step on shutdown, the simulator only in the demo profile,
DEBUG and demo mode never turned on. `docker compose config` validates the file where the
compose plugin exists; this machine's docker client has none, so the structure is checked as
YAML too (the file's anchors and merge keys resolved by the YAML loader, as compose does)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from sastools.harness import REPO

from .support import COMPOSE, ENV_EXAMPLE, production_env, read_env_file

# The Celery workers: every service whose command starts one.
WORKER = re.compile(r"celery -A sasproject worker .*-n ([a-z-]+)@%h")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: spec for name, spec in compose["services"].items()}


def _workers(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: spec for name, spec in services.items() if WORKER.search(str(spec.get("command", "")))}


def _seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return int(match[1]) * (60 if match[2] == "m" else 1)


def test_ports__every_published_port_bound_to_the_loopback(services: dict[str, dict[str, Any]]) -> None:
    published = {name: spec["ports"] for name, spec in services.items() if spec.get("ports")}

    assert {"proxy", "flower"} <= set(published)
    # The web is reached through the buffering proxy only (issue 26): gunicorn is not published.
    assert "web" not in published
    for name, ports in published.items():
        for port in ports:
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} on every interface"
    assert "ports" not in services["postgres"] and "ports" not in services["redis"]


def test_healthchecks__every_service_has_one(services: dict[str, dict[str, Any]]) -> None:
    missing = [name for name, spec in services.items() if not spec.get("healthcheck", {}).get("test")]

    assert missing == []
    assert "/healthz" in str(services["web"]["healthcheck"]["test"])
    assert "SAS_BEAT_HEARTBEAT_FILE" in services["beat"]["environment"]
    assert services["beat"]["environment"]["SAS_BEAT_HEARTBEAT_FILE"] in str(
        services["beat"]["healthcheck"]["test"]
    )


def test_workers__pinged_by_their_own_node_name(services: dict[str, dict[str, Any]]) -> None:
    workers = _workers(services)

    assert len(workers) == 10, sorted(workers)
    for name, spec in workers.items():
        match = WORKER.search(spec["command"])
        assert match
        node = match[1]
        assert spec["environment"]["SAS_WORKER_NAME"] == node, name
        assert "inspect ping" in str(spec["healthcheck"]["test"]) and "SAS_WORKER_NAME" in str(
            spec["healthcheck"]["test"]
        )


def _default_step_windows() -> dict[str, float]:
    """The settings' defaults (this session's environment shortens them): the longest a step's
    task may run - its window plus its queue timeout (Celery's limits count from the claim) -
    per workflow."""
    env = production_env(DJANGO_DEBUG="1")
    code = (
        "import json, django; django.setup(); from django.conf import settings as s; "
        "print(json.dumps({"
        "'order': s.SAS['ORDER_STEP_TIMEOUT'] + s.SAS['ORDER_QUEUE_TIMEOUT'], "
        "'catalogue': s.SAS['CATALOGUE_PAGE_TIMEOUT'] + s.SAS['CATALOGUE_QUEUE_TIMEOUT'], "
        "'http': s.SAS_HTTP_JOBS['STEP_TIMEOUT'] + s.SAS['ORDER_QUEUE_TIMEOUT'], "
        "'webhook': s.SAS_WEBHOOKS['STEP_TIMEOUT'] + s.SAS['ORDER_QUEUE_TIMEOUT']}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    windows: dict[str, float] = json.loads(result.stdout)
    return windows


def test_workers__stop_grace_period_longer_than_the_longest_step(services: dict[str, dict[str, Any]]) -> None:
    windows = _default_step_windows()
    # Celery's hard limit is 2 s past the soft one (scheduler/services/dispatch.py).
    longest = max(windows.values()) + 2

    assert longest >= 40, windows
    for name, spec in _workers(services).items():
        assert _seconds(spec["stop_grace_period"]) > longest, (name, spec.get("stop_grace_period"), windows)


def test_simulator__only_in_the_demo_profile(services: dict[str, dict[str, Any]]) -> None:
    profiled = {name: spec.get("profiles") for name, spec in services.items() if spec.get("profiles")}

    assert profiled == {"simulator": ["demo"]}


def test_environment__production_env_files__never_debug_or_demo(services: dict[str, dict[str, Any]]) -> None:
    for name, spec in services.items():
        files = [entry["path"] for entry in spec.get("env_file", [])]
        if name in ("postgres", "redis"):
            assert files == ["production.env.example", "production.env"], name
            continue
        if name == "proxy":
            # nginx reads none of them: it would only hold the secrets.
            assert files == [], name
            continue
        assert files == ["production.env.example", "production.env"], name
        environment = spec.get("environment") or {}
        assert environment.get("DJANGO_DEBUG", "0") == "0", name
        assert environment.get("SAS_DEMO", "0") == "0", name
        assert "demo_setup" not in str(spec.get("command", "")), name


def test_proxy__the_sites_port__nginx_conf_mounted__in_front_of_the_web(
    services: dict[str, dict[str, Any]],
) -> None:
    proxy = services["proxy"]
    mounts = [str(volume) for volume in proxy["volumes"]]
    conf = (REPO / "docker" / "nginx" / "nginx.conf").read_text()

    assert proxy["ports"] == ["127.0.0.1:8000:8080"]
    assert mounts == ["./nginx/nginx.conf:/etc/nginx/nginx.conf:ro"]
    assert proxy["depends_on"]["web"]["condition"] == "service_healthy"
    assert "/healthz" in str(proxy["healthcheck"]["test"])
    # The config's upstream is the web service on the port gunicorn binds in compose.
    assert "server web:8000;" in conf and services["web"]["environment"]["WEB_PORT"] == "8000"
    assert "listen 8080;" in conf


def test_redis__requires_the_password_and_refuses_to_start_without_one(
    services: dict[str, dict[str, Any]],
) -> None:
    command = " ".join(services["redis"]["command"])

    assert '--requirepass "$$REDIS_PASSWORD"' in command
    assert 'test -n "$$REDIS_PASSWORD" ||' in command
    assert "REDISCLI_AUTH" in str(services["redis"]["healthcheck"]["test"])


def test_flower__refuses_to_start_without_its_login(services: dict[str, dict[str, Any]]) -> None:
    assert 'test -n \\"$$FLOWER_BASIC_AUTH\\" ||' in services["flower"]["command"]


def test_image__gunicorn_and_collectstatic_at_build() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()

    assert re.search(r"^RUN .*\n?.*manage\.py collectstatic --noinput", dockerfile, re.M)
    assert 'CMD ["gunicorn", "-c", "sasproject/gunicorn.conf.py", "sasproject.wsgi"]' in dockerfile
    assert "runserver" not in dockerfile


def _compose_plugin() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(
    not _compose_plugin(), reason="no `docker compose` plugin on this machine (the YAML tests above stand in)"
)
def test_compose_config__valid_for_docker_compose() -> None:
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "--profile", "demo", "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 0, result.stderr


def test_flower__runs_read_only(services: dict[str, dict[str, Any]]) -> None:
    """Issue 26: compose's Flower, like the Procfile's, runs through the read-only wrapper (its
    task-sending and worker-control API refused; tests/e2e/test_agent_trust_live.py)."""
    from sastools.harness import procfile_commands

    assert "exec python -m sasproject.flower_readonly -A sasproject flower" in services["flower"]["command"]
    assert "python -m sasproject.flower_readonly -A sasproject flower" in procfile_commands()["flower"]


def test_pgbouncer__in_front_of_postgres__apps_through_it__sessions_direct(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    """Issue 29 item 4: the web and the workers reach PostgreSQL through PgBouncer (transaction
    mode, docker/pgbouncer/pgbouncer.ini, the file `make test-pooler` runs), and what needs a
    session through DATABASE_DIRECT_URL, the postgres service itself."""
    env = read_env_file(ENV_EXAMPLE)
    assert "@pgbouncer:6432/" in env["DATABASE_URL"]
    assert "@postgres:5432/" in env["DATABASE_DIRECT_URL"]
    bouncer = services["pgbouncer"]
    assert "./pgbouncer/pgbouncer.ini:/etc/pgbouncer/pgbouncer.ini:ro" in bouncer["volumes"]
    assert bouncer["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "ports" not in bouncer
    assert compose["x-infra"]["pgbouncer"]["condition"] == "service_healthy"
    ini = (REPO / "docker" / "pgbouncer" / "pgbouncer.ini").read_text()
    assert "\npool_mode = transaction\n" in ini
    assert "\n* = host=postgres port=5432\n" in ini

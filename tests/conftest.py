"""Shared fixtures.

- `db` (pytest-django): service tests in a rolled-back transaction on the real PostgreSQL.
- `live_db`: committed data that worker subprocesses can see; engine tables are truncated before
  and after each test (django-celery-beat's rows, made by a migration, are kept).
- `engine`: a session-wide set of real processes - the simulator, a control worker (scheduler +
  supervisor queues), an agent worker and celery beat (DatabaseScheduler) - all on the test
  database and the test Redis database.
- `start_worker`: extra workers a test may kill.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection

from simulator.client import SimulatorControl
from supervisor.default_rules import default_rules_ensure
from supervisor.models import AlertRule

from .harness import (
    AGENT_QUEUES,
    CONTROL_QUEUES,
    Proc,
    celery_beat,
    celery_worker,
    simulator_process,
    wait_for,
)

ENGINE_TABLES = [
    "scheduler_runevent",
    "scheduler_taskexecutionhistory",
    "supervisor_alert",
    "orders_order",
    "scheduler_step",
    "scheduler_run",
    "scheduler_job",
]


def _extra_tables() -> list[str]:
    # Later apps (webhooks, jobs...) register their tables here via settings.SAS_TEST_TRUNCATE.
    return list(getattr(settings, "SAS_TEST_TRUNCATE", []))


def truncate_engine_tables() -> None:
    """TRUNCATE locks its tables one after another, so it can deadlock with a worker that is
    still finishing a step from the previous test: PostgreSQL aborts one of the two, and we try
    again (the worker's transaction then completes, or is cut off by the truncate)."""
    tables = [t for t in _extra_tables() + ENGINE_TABLES if t in connection.introspection.table_names()]
    for attempt in range(10):
        try:
            with connection.cursor() as cursor:
                cursor.execute(f"TRUNCATE {', '.join(tables)} CASCADE")
            # The CASCADE empties the alert rules (they reference jobs): put back the shipped
            # ones, which the engine's signals raise alerts into.
            default_rules_ensure(rule_model=AlertRule)
            return
        except OperationalError:
            if attempt == 9:
                raise
            time.sleep(0.2)


@pytest.fixture(autouse=True)
def _rate_budgets_fresh() -> None:
    """Every test starts with full rate budgets (scheduler/limits.py keeps them in Redis per
    user id, and live tests reuse users such as the demo's): a test's 429 is its own doing."""
    from sasproject.redis_client import get_redis

    client = get_redis()
    keys = list(client.scan_iter(f"{settings.REDIS_PREFIX}sas:rate:*", count=1000))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest, django_test_environment: None, django_db_blocker: Any
) -> Iterator[None]:
    """Always create the test database (pytest-django only does for tests marked django_db;
    live tests use committed data through `live_db` instead of that mark)."""
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        db_cfg = setup_databases(verbosity=0, interactive=False, aliases={"default"})  # type: ignore[arg-type]
    yield
    with django_db_blocker.unblock():
        teardown_databases(db_cfg, verbosity=0)


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    path = Path(os.environ.get("SAS_ARTIFACTS", Path(__file__).resolve().parent.parent / "artifacts"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def redis_client() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.REDIS_URL)
    assert settings.REDIS_PREFIX.startswith("test"), "tests must run under their own Redis key prefix"

    def clean() -> None:
        for key in client.scan_iter(f"{settings.REDIS_PREFIX}*", count=1000):
            client.delete(key)

    clean()
    yield client
    clean()
    client.close()


@pytest.fixture
def live_db(django_db_setup: Any, django_db_blocker: Any) -> Iterator[None]:
    with django_db_blocker.unblock():
        truncate_engine_tables()
        yield
        truncate_engine_tables()


@pytest.fixture(scope="session")
def worker_env(django_db_setup: Any) -> dict[str, str]:
    """The environment of every subprocess: the test database and the test Redis."""
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    env = dict(os.environ)
    env["DATABASE_URL"] = f"postgres://{user}{password}@{host}:{port}/{db['NAME']}"
    env["DJANGO_SETTINGS_MODULE"] = "sasproject.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env["DJANGO_DEBUG"] = "0"
    # Workers know the engine's own test workflow (jobs of it fire in their dispatcher).
    env["SAS_WORKFLOW_MODULES"] = "tests.engine_workflow"
    # The shared workers evaluate no alert rules (a background alert would meet other tests'
    # assertions); tests/alerting starts its own workers with it on.
    env["SAS_ALERTS_ENABLED"] = "0"
    return env


@dataclass
class Engine:
    simulator: Proc
    control: Proc
    agents: Proc
    beat: Proc
    sim: SimulatorControl
    env: dict[str, str]
    log_dir: Path


# The session engine, once a test of this process has started it (see `engine_paused`).
_ENGINES: list[Engine] = []


@pytest.fixture(scope="session")
def engine_session(
    worker_env: dict[str, str], redis_client: redis.Redis, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Engine]:
    log_dir = tmp_path_factory.mktemp("engine-logs")
    url = os.environ["SIMULATOR_URL"]
    sim_proc = simulator_process(url=url, log_dir=log_dir, env=worker_env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    control = celery_worker(
        name="control", queues=CONTROL_QUEUES, log_dir=log_dir, env=worker_env, concurrency=2
    )
    agents = celery_worker(name="agents", queues=AGENT_QUEUES, log_dir=log_dir, env=worker_env, concurrency=4)
    beat = celery_beat(log_dir=log_dir, env=worker_env)
    procs = [control, agents, beat]
    try:
        control.start(ready_marker=" ready.")
        agents.start(ready_marker=" ready.")
        beat.start(ready_marker="beat: Starting")
        engine = Engine(sim_proc, control, agents, beat, SimulatorControl(url), worker_env, log_dir)
        _ENGINES.append(engine)
        yield engine
    finally:
        _ENGINES.clear()
        for proc in [*procs, sim_proc]:
            proc.stop()


@pytest.fixture
def engine(engine_session: Engine, live_db: None, redis_client: redis.Redis) -> Iterator[Engine]:
    """The running engine with a clean simulator, clean breakers and clean engine tables."""
    for proc in (
        engine_session.control,
        engine_session.agents,
        engine_session.beat,
        engine_session.simulator,
    ):
        assert proc.alive(), f"{proc.name} died:\n{proc.log()[-3000:]}"
    engine_session.sim.reset()
    for key in redis_client.scan_iter(f"{settings.REDIS_PREFIX}sas:breaker:*"):
        redis_client.delete(key)
    yield engine_session
    engine_session.sim.reset()


@pytest.fixture
def engine_paused(live_db: None) -> Iterator[None]:
    """For a live test that plays the scheduler itself on committed rows: the session engine,
    if an earlier test of this process started it (pytest-xdist runs files in any order), would
    claim them. Its workers and beat are stopped (SIGSTOP, whole process groups) for the test
    and continued after it, before `live_db` truncates."""
    procs = [proc for engine in _ENGINES for proc in (engine.beat, engine.control, engine.agents)]
    for proc in procs:
        proc.kill(signal.SIGSTOP)
    try:
        yield
    finally:
        for proc in procs:
            proc.kill(signal.SIGCONT)


@pytest.fixture
def start_worker(worker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start extra workers for one test; all are stopped at the end."""
    started: list[Proc] = []

    def _start(*, name: str, queues: str = AGENT_QUEUES, concurrency: int = 2, **env: str) -> Proc:
        proc = celery_worker(
            name=name, queues=queues, log_dir=tmp_path, env={**worker_env, **env}, concurrency=concurrency
        )
        started.append(proc)
        return proc.start(ready_marker=" ready.")

    yield _start
    for proc in started:
        proc.stop()


@pytest.fixture
def manual_scheduler(settings: Any) -> None:
    """The test plays the scheduler itself (claims with `step_claim_due`, replies with
    `step_reply`): submission must leave the first step Pending instead of claiming it in the
    submit transaction (SAS["CLAIM_ON_SUBMIT"], on in production)."""
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": False}


@pytest.fixture
def demo_user(live_db: None) -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="alice")
    return user


__all__ = ["Engine", "wait_for"]

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

import contextlib
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.db import OperationalError, connection

from alerting.default_rules import default_rules_ensure
from alerting.models import AlertRule
from sastools.harness import (
    AGENT_QUEUES,
    CONTROL_QUEUES,
    Proc,
    celery_beat,
    celery_worker,
    publishing_to,
    simulator_process,
    wait_for,
)
from sastools.testkit.fixtures import harness  # noqa: F401 - the harness on a virtual clock (issue 31)
from simulator.client import SimulatorControl

ENGINE_TABLES = [
    "scheduler_runevent",
    "scheduler_taskexecutionhistory",
    "alerting_alert",
    "orders_order",
    "scheduler_step",
    "scheduler_run",
    "scheduler_job",
    "scheduler_dispatchershard",
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
def _shipped_rules_after_flush(request: pytest.FixtureRequest, django_db_blocker: Any) -> Iterator[None]:
    """A `transactional_db` test ends with pytest-django's flush, which empties every table, the
    shipped alert rules (a migration's rows) too: put them back after it (this autouse fixture is
    set up before the test's own fixtures, so torn down after the flush). pytest-django runs
    transactional tests last, but `--dist loadfile` hands a process one file after another, and a
    later file's test found no rule and raised no alert (`make test-fast`: the live tests, whose
    `live_db` puts the rules back, were no longer in between). A test asks for `transactional_db`
    by name: with `django_db(transaction=True)` the flush comes after this fixture's teardown
    (pytest-django's own fixture is set up first), and the rows stay gone - refused at collection
    (`pytest_collection_modifyitems`)."""
    yield
    if "transactional_db" in request.fixturenames:
        from django.contrib.auth.models import Group, Permission
        from django_celery_beat.models import IntervalSchedule, PeriodicTask

        from ops.roles import roles_ensure
        from supervisor.periodic import periodic_tasks_ensure

        with django_db_blocker.unblock():
            default_rules_ensure(rule_model=AlertRule)
            # ...and the shipped roles (ops/0001_roles' groups), which the flush empties too.
            roles_ensure(group_model=Group, permission_model=Permission)
            # ...and the shipped beat rows (the engine's and alerting's migrations): without them the
            # session engine's beat, reloading its schedule, sweeps no more and dispatches no job
            # (CI: 13 live tests waited for runs that nothing moved after a throttle test's flush).
            periodic_tasks_ensure(
                interval_model=IntervalSchedule, task_model=PeriodicTask, intervals=settings.SAS
            )


@pytest.fixture(autouse=True)
def _rate_budgets_fresh() -> None:
    """Every test starts with full rate budgets (scheduler/limits.py keeps them in Redis per
    user id, and live tests reuse users such as the demo's): a test's 429 is its own doing."""
    from sasproject.redis_client import get_redis

    client = get_redis()
    keys = list(client.scan_iter(f"{settings.REDIS_PREFIX}sas:rate:*", count=1000))
    # ...and with no failed sign-ins counted (sasproject/login_throttle.py), and every breaker
    # closed and forgotten (agents/breaker.py: a webhook or HTTP-call breaker another file's test
    # left made the health page list one breaker more, in whichever test came after it).
    keys += list(client.scan_iter(f"{settings.REDIS_PREFIX}sas:login:*", count=1000))
    keys += list(client.scan_iter(f"{settings.REDIS_PREFIX}sas:breaker:*", count=1000))
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


def database_url(name: str) -> str:
    """A URL of the configured PostgreSQL server for the database `name`."""
    db = settings.DATABASES["default"]
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{user}{password}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{name}"


# `make test-pooler` (issue 29 item 4): SAS_TEST_POOLER=1 puts PgBouncer in transaction mode
# (docker/pgbouncer/pgbouncer.ini, sastools/pooler.py) between every subprocess of the session -
# the engine's workers, beat, dispatchers - and PostgreSQL: their DATABASE_URL is the pooler's,
# DATABASE_DIRECT_URL the server's (what needs a session). The test process itself stays direct
# (it makes and truncates the test database). Tests marked `pooler_only` run only then.
POOLER_MODE = os.environ.get("SAS_TEST_POOLER", "") == "1"
# The subset `make test-pooler` runs (marked `pooler` here): orders through the agents, the
# periodic tick and the supervisor's sweep; the concurrency keys' advisory locks; the jobs
# dispatcher's shard leases (and its quota reads); long steps; and the pooler's own tests (the
# quotas' locks, the alert evaluator's, the dispatcher's idle limit).
POOLER_SUBSET = (
    "e2e/test_order_flow_live.py::test_order__healthy_services__completes_with_one_effect_each[redis]",
    "e2e/test_order_flow_live.py::test_submit__kick_lost__periodic_tick_claims_it",
    "e2e/test_crash_live.py",
    "e2e/test_holds_live.py::test_key_limit_1__",
    "scheduler/test_jobs_live.py::test_two_dispatchers__1000_jobs__every_occurrence_fires_exactly_once",
    "scheduler/test_jobs_live.py::test_beat__fires_a_job_and_settles_its_run_end",
    # A long step's page: its transaction's own statement and idle limits (set_config), and the
    # history export's streamed read on the direct connection while it heartbeats.
    "e2e/test_long_steps_live.py::test_reprice__worker_frozen_mid_page__the_database_ends_the_page",
    "e2e/test_long_steps_live.py::test_export__heartbeats_carry_it_past_its_first_window",
    "sasproject/test_pooler_live.py",
)
# Server connections of the session's pooler: fewer than the session's client connections
# (two workers, beat, the tests' extra workers), so clients share them and any state left on a
# server session shows up in another client.
POOLER_SERVER_CONNECTIONS = 4


@pytest.fixture(scope="session")
def pooler_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The session's PgBouncer (SAS_TEST_POOLER=1), in front of the test database's server."""
    from sastools.pooler import pgbouncer_running

    db = settings.DATABASES["default"]
    server = (db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432))
    with pgbouncer_running(
        server=server,
        log_dir=tmp_path_factory.mktemp("pgbouncer"),
        user=db.get("USER") or "postgres",
        pool_size=POOLER_SERVER_CONNECTIONS,
    ) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def worker_env(django_db_setup: Any, request: pytest.FixtureRequest) -> dict[str, str]:
    """The environment of every subprocess: the test database and the test Redis (through the
    session's pooler with SAS_TEST_POOLER=1)."""
    env = dict(os.environ)
    env["DATABASE_URL"] = database_url(settings.DATABASES["default"]["NAME"])
    env.pop("DATABASE_DIRECT_URL", None)
    if POOLER_MODE:
        env["DATABASE_DIRECT_URL"] = env["DATABASE_URL"]
        bouncer = request.getfixturevalue("pooler_session")
        env["DATABASE_URL"] = bouncer.url(settings.DATABASES["default"]["NAME"])
    env["DJANGO_SETTINGS_MODULE"] = "sasproject.settings"
    env["PYTHONUNBUFFERED"] = "1"
    env["DJANGO_DEBUG"] = "0"
    # Workers know the engine's own test workflow (jobs of it fire in their dispatcher).
    # And the tests' Django-framework tasks (tests/tasksbackend/tasks.py, issue 31 item 4).
    env["SAS_WORKFLOW_MODULES"] = "tests.engine_workflow,tests.tasksbackend.tasks"
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
    broker: str = "redis"
    paused: bool = False

    def pause(self) -> None:
        """SIGSTOP its workers and beat (whole process groups): another engine's test runs. Never
        inside a transaction: a process stopped in one (beat reading its schedule, a worker in
        a step) would hold its locks for as long as it is stopped, and the next TRUNCATE or
        schedule update would wait on them forever. So stop, look, and if any connection of the
        test database but ours is idle in a transaction, continue them a moment and try again."""
        if self.paused:
            return
        procs = (self.beat, self.control, self.agents)
        for _ in range(100):
            for proc in procs:
                proc.kill(signal.SIGSTOP)
            time.sleep(0.05)  # statements already sent finish on the server
            if not _others_in_transaction():
                break
            for proc in procs:
                proc.kill(signal.SIGCONT)
            time.sleep(0.1)
        else:
            raise AssertionError(f"the {self.broker} engine is always inside a transaction")
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            for proc in (self.beat, self.control, self.agents):
                proc.kill(signal.SIGCONT)
            self.paused = False


def _others_in_transaction() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
        )
        return bool(cursor.fetchone()[0])


# The session's engines by broker, once a test of this process has started them (see
# `engine_paused`). Only one runs at a time: both would sweep and claim the same tables.
_ENGINES: dict[str, Engine] = {}


# ---------------------------------------------------------------------------------------------
# Both brokers (issue 22). A test marked `both_brokers` runs twice, [redis] and [rabbitmq]: the
# `broker` fixture says which, `broker_env` is the subprocesses' environment on it, `engine` the
# session engine on it, and the test process publishes to it. RabbitMQ is the machine's, on a
# vhost of the session's own (sastools/rabbit.py); when it is unreachable the [rabbitmq] tests FAIL.
# ---------------------------------------------------------------------------------------------
BROKERS = ("redis", "rabbitmq")


# The longest test files, handed to the xdist processes first (`--dist loadfile` deals files in
# collection order once `pytest_configure` below turns off xdist's own reordering): started last,
# one of them was the suite's tail while the other process sat idle. The live ones first (mostly
# waiting out outages: a service down, a worker stopped), then the database-only tier's
# (`make test-fast`, issue 27 item 7: its whole-suite fuzz, a single test, came last and ran
# alone for its 8 s).
LONGEST_FILES = (
    "e2e/test_outages_live.py",
    "e2e/test_outage_live.py",
    "e2e/test_rabbitmq_live.py",
    "e2e/test_consumer_timeout_live.py",
    "e2e/test_bulkhead_live.py",
    "e2e/test_noisy_neighbour_live.py",
    "e2e/test_late_reply_live.py",
    "devservices/test_make_run_live.py",
    "scheduler/test_jobs_live.py",
    "alerting/test_live.py",
    "scheduler/test_dispatcher_scaleout_live.py",
    "chaos/test_netns_live.py",
    "sasproject/test_logs_live.py",
    "test_properties_bad_input.py",
    "ops/test_run_actions.py",
    "sasproject/test_api_schemathesis.py",
    "sasproject/test_login_throttle.py",
    "agents/test_agent_task.py",
    "ops/test_operator_action_migration.py",
    "admin/test_admin_pages.py",
    "agents/test_http_call.py",
    "alerting/test_names_and_secret.py",
    "alerting/test_models_moved.py",
    "admin/test_admin_actions.py",
    "admin/test_operator_tools.py",
)


# The test tiers (issue 27 item 7), markers given here from the paths and the fixtures, never by
# hand: `live` (a *_live.py file, or a test using a fixture that starts real processes: every
# one of them takes `worker_env`, the subprocesses' environment), `browser` (a *browser* file),
# `deploy` (tests/deploy). The rest is the database-only tier, `make test-fast`.
TESTS_DIR = Path(__file__).resolve().parent
LIVE_FIXTURES = frozenset({"worker_env"})


def tiers(item: pytest.Item) -> list[str]:
    path = item.path
    relative = path.relative_to(TESTS_DIR).as_posix() if path.is_relative_to(TESTS_DIR) else path.name
    fixtures = set(getattr(item, "fixturenames", ()))
    found = []
    if path.name.endswith("_live.py") or fixtures & LIVE_FIXTURES:
        found.append("live")
    if "browser" in path.name:
        found.append("browser")
    if relative.startswith("deploy/"):
        found.append("deploy")
    return found


def pytest_configure(config: pytest.Config) -> None:
    """A fast password hasher in the test process (Django's "Speeding up the tests";
    tests/hashers.py: PBKDF2 with few rounds, which the subprocesses' stock hasher still checks):
    PBKDF2's 870,000 rounds cost 0.4 s a hash on 2 cores, and the sign-in, token and admin tests hash
    hundreds of times (the sign-in throttle's tests alone took 150 s of `make test-fast`; the
    whole tier went from 393 s to 200 s at a load average of 6). The defaults stay after it, so
    a PBKDF2 hash made elsewhere still checks; a test about the real hashers sets them itself.
    Worker subprocesses keep the real settings."""
    settings.PASSWORD_HASHERS = [
        "tests.hashers.FastPBKDF2PasswordHasher",
        *settings.PASSWORD_HASHERS,
    ]
    # pytest-xdist (3.5+) deals `--dist loadfile` files by their number of tests, most first,
    # unless told not to: LONGEST_FILES' order (`pytest_collection_modifyitems`) was undone, and
    # the one-test fuzz file, dealt last, was the fast tier's tail. Read by xdist's scheduler in
    # the controlling process, after this hook.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    _test_database_from_template(config)


def _test_database_from_template(config: pytest.Config) -> None:
    """Each process's test database is a copy of a migrated template (sastools/testdb.py), made
    once per schema by the first process (pytest-xdist's controller, before its workers start;
    they inherit its name through the environment). SAS_TEST_DB_TEMPLATE=0 migrates each test
    database itself, as Django does by default."""
    if os.environ.get("SAS_TEST_DB_TEMPLATE", "1") == "0":
        return
    from django.db import connections

    from sastools.testdb import template_ready

    name = os.environ.get("SAS_TEST_DB_TEMPLATE_NAME", "")
    if not name or not hasattr(config, "workerinput"):
        name = template_ready(database_url(settings.DATABASES["default"]["NAME"]))
        os.environ["SAS_TEST_DB_TEMPLATE_NAME"] = name
    settings.DATABASES["default"]["TEST"]["TEMPLATE"] = name
    connections["default"].settings_dict["TEST"]["TEMPLATE"] = name


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # LONGEST_FILES first, in its order; then the other files by their number of tests, most
    # first (what xdist's own reorder did for all of them).
    per_file = Counter(item.path for item in items)

    def rank(item: pytest.Item) -> tuple[int, int]:
        path = item.path.as_posix()
        listed = next((i for i, name in enumerate(LONGEST_FILES) if path.endswith(name)), len(LONGEST_FILES))
        return listed, -per_file[item.path]

    for item in items:
        for tier in tiers(item):
            item.add_marker(tier)
        if any(f"/{name}" in f"/{item.nodeid}" for name in POOLER_SUBSET):
            item.add_marker("pooler")
        marker = item.get_closest_marker("django_db")
        if marker is not None and marker.kwargs.get("transaction"):
            raise pytest.UsageError(
                f"{item.nodeid}: ask for the `transactional_db` fixture instead of "
                "django_db(transaction=True) (tests/conftest.py, `_shipped_rules_after_flush`)"
            )
    items.sort(key=rank)  # stable: a file's tests keep their order
    if not POOLER_MODE:
        skipped = [item for item in items if item.get_closest_marker("pooler_only")]
        if skipped:
            config.hook.pytest_deselected(items=skipped)
            items[:] = [item for item in items if not item.get_closest_marker("pooler_only")]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_brokers") and "broker" in metafunc.fixturenames:
        metafunc.parametrize("broker", BROKERS, indirect=True)


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> str:
    """ "redis" unless the test is marked `both_brokers` (then each in turn)."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture(scope="session")
def rabbit_vhost() -> Iterator[str]:
    from sastools.rabbit import session_vhost

    with session_vhost(f"sas-test-{os.getpid()}") as name:
        yield name


@pytest.fixture(scope="session")
def rabbit_env(worker_env: dict[str, str], rabbit_vhost: str) -> dict[str, str]:
    from sastools.rabbit import amqp_url

    return {**worker_env, "CELERY_BROKER_URL": amqp_url(rabbit_vhost)}


@pytest.fixture
def broker_env(broker: str, worker_env: dict[str, str], request: pytest.FixtureRequest) -> dict[str, str]:
    """The subprocesses' environment on the test's broker."""
    if broker == "rabbitmq":
        return dict(request.getfixturevalue("rabbit_env"))
    return worker_env


@pytest.fixture(scope="session")
def simulator_session(worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """The session's simulator, shared by the engines of both brokers."""
    log_dir = tmp_path_factory.mktemp("simulator-logs")
    proc = simulator_process(url=os.environ["SIMULATOR_URL"], log_dir=log_dir, env=worker_env)
    proc.start(ready_marker="SIMULATOR_LISTENING")
    yield proc
    proc.stop()


@contextlib.contextmanager
def _engine_running(
    *, broker_name: str, env: dict[str, str], simulator: Proc, log_dir: Path
) -> Iterator[Engine]:
    control = celery_worker(name="control", queues=CONTROL_QUEUES, log_dir=log_dir, env=env, concurrency=2)
    agents = celery_worker(name="agents", queues=AGENT_QUEUES, log_dir=log_dir, env=env, concurrency=4)
    beat = celery_beat(log_dir=log_dir, env=env)
    procs = [control, agents, beat]
    # The other engine, if running, must not claim while this one starts.
    for other in _ENGINES.values():
        other.pause()
    try:
        control.start(ready_marker=" ready.")
        agents.start(ready_marker=" ready.")
        beat.start(ready_marker="beat: Starting")
        engine = Engine(
            simulator,
            control,
            agents,
            beat,
            SimulatorControl(os.environ["SIMULATOR_URL"]),
            env,
            log_dir,
            broker_name,
        )
        _ENGINES[broker_name] = engine
        yield engine
    finally:
        _ENGINES.pop(broker_name, None)
        for proc in procs:
            proc.kill(signal.SIGCONT)  # a stopped process would not see the SIGTERM
            proc.stop()


@pytest.fixture(scope="session")
def engine_session(
    worker_env: dict[str, str],
    redis_client: redis.Redis,
    simulator_session: Proc,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    log_dir = tmp_path_factory.mktemp("engine-logs")
    with _engine_running(
        broker_name="redis", env=worker_env, simulator=simulator_session, log_dir=log_dir
    ) as e:
        yield e


@pytest.fixture(scope="session")
def engine_session_rabbitmq(
    rabbit_env: dict[str, str],
    redis_client: redis.Redis,
    simulator_session: Proc,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Engine]:
    """The same engine with RabbitMQ as its broker (the session's vhost); paused between its
    tests, so that outside them the Redis engine is the one that runs, as before."""
    log_dir = tmp_path_factory.mktemp("engine-rabbitmq-logs")
    with _engine_running(
        broker_name="rabbitmq", env=rabbit_env, simulator=simulator_session, log_dir=log_dir
    ) as e:
        e.pause()
        for other in _ENGINES.values():
            if other is not e:
                other.resume()
        yield e


@pytest.fixture
def engine(
    broker: str, request: pytest.FixtureRequest, live_db: None, redis_client: redis.Redis
) -> Iterator[Engine]:
    """The running engine on the test's broker, with a clean simulator, clean breakers and clean
    engine tables; any other broker's engine is paused for the test."""
    chosen: Engine = request.getfixturevalue(
        "engine_session_rabbitmq" if broker == "rabbitmq" else "engine_session"
    )
    for other in _ENGINES.values():
        if other is not chosen:
            other.pause()
    chosen.resume()
    for proc in (chosen.control, chosen.agents, chosen.beat, chosen.simulator):
        assert proc.alive(), f"{proc.name} died:\n{proc.log()[-3000:]}"
    chosen.sim.reset()
    for key in redis_client.scan_iter(f"{settings.REDIS_PREFIX}sas:breaker:*"):
        redis_client.delete(key)
    try:
        if broker == "rabbitmq":
            with publishing_to(chosen.env["CELERY_BROKER_URL"]):
                yield chosen
        else:
            yield chosen
    finally:
        chosen.sim.reset()
        # Outside a RabbitMQ test the Redis engine runs, as before there was a second one.
        if broker == "rabbitmq":
            chosen.pause()
            if "redis" in _ENGINES:
                _ENGINES["redis"].resume()


@pytest.fixture
def engine_paused(live_db: None) -> Iterator[None]:
    """For a live test that plays the scheduler itself on committed rows: the session engines,
    if an earlier test of this process started them (pytest-xdist runs files in any order),
    would claim them. Their workers and beat are stopped (SIGSTOP, whole process groups) for
    the test and continued after it (those that ran), before `live_db` truncates."""
    running = [engine for engine in _ENGINES.values() if not engine.paused]
    for engine in running:
        engine.pause()
    try:
        yield
    finally:
        for engine in running:
            engine.resume()


@pytest.fixture
def start_worker(broker_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Proc]]:
    """Start extra workers for one test (on the test's broker); all are stopped at the end."""
    started: list[Proc] = []

    def _start(
        *, name: str, queues: str = AGENT_QUEUES, concurrency: int = 2, pool: str = "prefork", **env: str
    ) -> Proc:
        proc = celery_worker(
            name=name,
            queues=queues,
            log_dir=tmp_path,
            env={**broker_env, **env},
            concurrency=concurrency,
            pool=pool,
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

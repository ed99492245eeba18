"""PostgreSQL through PgBouncer in transaction mode (issue 29 item 4; sasproject/database.py,
docs/deploying/deploy.md "Through a pooler").

Each test runs the product's own code in a subprocess configured as a deployment behind a pooler
(DATABASE_URL: a PgBouncer of the test's own, docker/pgbouncer/pgbouncer.ini; DATABASE_DIRECT_URL:
PostgreSQL) - tests/sasproject/pooled_probe.py - against the session's test database. With one
server connection in the pool, every client of the pooler shares one server session, so state a
client leaves on it is seen by the next: what a session-scoped lock or setting would do at scale.
The last test (`pooler_only`, `make test-pooler`) checks that the session's engine really ran
through the session's pooler.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings

from alerting.services import EVALUATOR_LOCK
from orders.models import Order
from sastools.harness import REPO, wait_for
from sastools.pooler import Bouncer, available, pgbouncer_running
from scheduler.models import Run
from tests.conftest import database_url
from tests.e2e.helpers import submit_order, wait_run

pytestmark = pytest.mark.skipif(
    not available(), reason="Debian's pgbouncer is not installed (make pgbouncer)"
)


def _server() -> tuple[str, int]:
    db = settings.DATABASES["default"]
    return db.get("HOST") or "127.0.0.1", int(db.get("PORT") or 5432)


def _bouncer(tmp_path_factory: pytest.TempPathFactory, pool_size: int) -> Iterator[Bouncer]:
    with pgbouncer_running(
        server=_server(), log_dir=tmp_path_factory.mktemp("pgbouncer"), pool_size=pool_size
    ) as bouncer:
        yield bouncer


@pytest.fixture(scope="module")
def one_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bouncer]:
    """A pooler with one server connection: all its clients share one server session."""
    yield from _bouncer(tmp_path_factory, 1)


@pytest.fixture(scope="module")
def four_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bouncer]:
    yield from _bouncer(tmp_path_factory, 4)


def probe(bouncer: Bouncer, worker_env: dict[str, str], *args: str, **env: str) -> dict[str, Any]:
    """tests/sasproject/pooled_probe.py through `bouncer`; its JSON answer."""
    name = settings.DATABASES["default"]["NAME"]
    full_env = {
        **worker_env,
        "DATABASE_URL": bouncer.url(name),
        "DATABASE_DIRECT_URL": database_url(name),
        **env,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.sasproject.pooled_probe", *args],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("PROBE ")]
    assert done.returncode == 0 and lines, f"probe {args} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return dict(json.loads(lines[-1].removeprefix("PROBE ")))


def test_pooled_settings__direct_alias_for_sessions__no_startup_options_prepares_or_server_cursors(
    one_server, worker_env
):
    out = probe(one_server, worker_env, "settings", DATABASE_IDLE_IN_TRANSACTION_TIMEOUT="7")

    assert out["pooled"] is True
    assert out["session_alias"] == "direct"
    assert out["default_port"] == one_server.port
    assert out["direct_port"] == _server()[1]
    # PgBouncer refuses a startup `options` (the connection would fail): only the direct alias has it.
    assert out["default_options"] is False
    assert out["direct_idle"] == "7s"
    assert out["pooled_idle"] == "0"
    assert out["prepare_threshold"] is None
    assert out["server_side_cursors"] is False


def test_alert_evaluator__lock_another_client_left_on_the_pooled_session__does_not_run(
    one_server, worker_env
):
    """Another client of the pooler holds the evaluator's session lock, left on the one server
    session (as an evaluator taking it through the pooler would). Taken through the pooler, the
    evaluator's own try would run on that same session and succeed (advisory locks are
    re-entrant): two evaluators at once. On its direct connection it sees the lock held."""
    with psycopg.connect(one_server.url(settings.DATABASES["default"]["NAME"]), autocommit=True) as other:
        assert other.execute("SELECT pg_advisory_lock(%s)", [EVALUATOR_LOCK]).fetchone() is not None

        assert probe(one_server, worker_env, "evaluator") == {"ran": False}

        other.execute("SELECT pg_advisory_unlock(%s)", [EVALUATOR_LOCK])
        assert probe(one_server, worker_env, "evaluator") == {"ran": True}
        # The tick's JIT setting was its transaction's: the shared server session has the default.
        assert other.execute("SHOW jit").fetchone() == ("on",)
    # ...and the tick left no advisory lock on any session.
    with psycopg.connect(database_url(settings.DATABASES["default"]["NAME"]), autocommit=True) as direct:
        held = direct.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database ="
            " (SELECT oid FROM pg_database WHERE datname = current_database())"
        ).fetchone()
    assert held == (0,)


def test_dispatcher_transaction__idle_past_its_limit_through_the_pooler__ended_by_postgresql(
    one_server, worker_env
):
    """DATABASE_IDLE_IN_TRANSACTION_TIMEOUT cannot reach a pooled session as a startup option;
    the dispatcher's transactions set it themselves (transaction-scoped), and PostgreSQL ends
    one that idles past it (a dispatcher cut off mid-batch frees its shard's rows)."""
    out = probe(one_server, worker_env, "idle_limit", DATABASE_IDLE_IN_TRANSACTION_TIMEOUT="1")

    assert out["seen"] == "1s"
    assert out["error"].startswith("InternalError: "), out["error"]
    assert out["after"] == "0"  # the server connection went back to the pool without it


def test_quota__eight_submits_at_once_through_the_pooler__exactly_the_quota_accepted(
    four_servers, worker_env, engine_paused, demo_user
):
    out = probe(
        four_servers,
        worker_env,
        "quota",
        str(demo_user.id),
        SAS_QUOTA_RUNS_IN_FLIGHT="3",
    )

    assert out == {"accepted": 3, "refused": 5}
    assert Order.objects.filter(owner=demo_user).count() == 3


@pytest.mark.pooler_only
def test_engine_through_the_session_pooler__an_order_completes__its_transactions_pooled(
    engine, demo_user, pooler_session
):
    def pooled_transactions() -> int:
        name = settings.DATABASES["default"]["NAME"]
        stats = pooler_session.show("STATS")
        return sum(int(row["total_xact_count"]) for row in stats if row["database"] == name)

    assert Path(engine.env["DATABASE_URL"]).name == settings.DATABASES["default"]["NAME"]
    assert f":{pooler_session.port}/" in engine.env["DATABASE_URL"]
    before = pooled_transactions()

    run = wait_run(submit_order(demo_user).run_id, (Run.State.COMPLETED,))

    assert run.state == Run.State.COMPLETED
    # Three steps' claims, dispatches and replies, at the least, went through PgBouncer (its
    # totals are refreshed every second: sastools/pooler.py).
    wait_for(lambda: pooled_transactions() - before >= 6, timeout=5, what="the pooler to count them")

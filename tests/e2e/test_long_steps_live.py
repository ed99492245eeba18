"""Long steps under real workers (issue 9): a paginated reprice killed with SIGKILL mid-page
resumes from its checkpoint and applies every page once; a page that hangs in the database past
its deadline, and a worker frozen mid-page, are ended by the database at complete-by, taken back
by the supervisor and redone once; a heartbeat export outlives its first window on heartbeats,
and when its worker is frozen (SIGSTOP) the supervisor takes the step back within one heartbeat
window + one sweep, and the worker, resumed (SIGCONT), finds its lease gone and writes nothing.
One worker (both demo queues) serves the module. (The database restarted mid-page:
tests/e2e/test_outage_live.py, on a private PostgreSQL.)"""

from __future__ import annotations

import csv
import io
import signal
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count, Min, Sum
from django.test import Client

from catalogue.models import Product, RepriceLedger
from catalogue.services import catalogue_seed, reprice_submit
from exports.models import Export, ExportFile
from exports.services import export_request
from sastools.harness import Proc, celery_worker, wait_for
from scheduler.models import Checkpoint, HeartbeatStatus, Run, Step, TaskExecutionHistory

from ..orders.conftest import token_client
from .helpers import (
    assert_repriced_once,
    attempt_statuses,
    django_query,
    stall_once,
    stall_remove,
    stalled_lease,
    wait_run,
)

WINDOW = 1.5  # SAS_EXPORT_HEARTBEAT in tests/envsetup.py
SWEEP = 1.0  # SAS_SUPERVISOR_INTERVAL


@pytest.fixture(scope="module")
def long_worker(worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """The demos' agents: one process, so a test can freeze or kill the one that holds a step.
    Pages are paced (0.5 s inside each page's transaction) so a kill can land mid-page; an
    export takes 5 s, longer than its first window (2 s to start + 1.5 s) - it lives on heartbeats."""
    env = {**worker_env, "SAS_CATALOGUE_PAGE_DELAY": "0.5", "SAS_EXPORT_MIN_SECONDS": "5"}
    proc = celery_worker(
        name="long",
        queues="agent.catalogue,agent.exports",
        log_dir=tmp_path_factory.mktemp("long-worker"),
        env=env,
        concurrency=1,
    )
    proc.start(ready_marker=" ready.")
    yield proc
    proc.kill(signal.SIGCONT)
    proc.stop()


@pytest.fixture
def catalogue(live_db: None) -> Iterator[None]:
    def clean() -> None:
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE catalogue_product, catalogue_repriceledger RESTART IDENTITY")

    clean()
    yield
    clean()


def _page_open() -> bool:
    """A reprice page's transaction is open in the database (its effect written, not committed)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND state = 'idle in transaction'
              AND query LIKE '%%catalogue_repriceledger%%'
            """
        )
        return bool(cursor.fetchone()[0])


def test_reprice__worker_killed_mid_page__resumes_from_checkpoint_each_page_applied_once(
    engine: Any, demo_user: Any, long_worker: Proc, catalogue: None
) -> None:
    catalogue_seed(rows=6000)  # 6 pages of 1,000
    run = reprice_submit(owner_id=demo_user.id, by_staff=True, percent="10")
    wait_for(
        lambda: RepriceLedger.objects.filter(run_id=run.id).count() >= 2,
        timeout=30,
        what="two pages committed",
    )
    wait_for(_page_open, timeout=10, interval=0.02, what="a page's transaction open")

    long_worker.kill(signal.SIGKILL)  # parent and pool child, mid-page
    wait_for(lambda: not _page_open(), timeout=10, what="PostgreSQL to abort the killed page")
    committed = RepriceLedger.objects.filter(run_id=run.id).aggregate(pages=Count("id"), rows=Sum("rows"))
    repriced_at_kill = Product.objects.filter(repriced_count=1).count()
    checkpoint_at_kill = Checkpoint.objects.get(run=run)
    long_worker.start(ready_marker=" ready.")

    run = wait_run(run.id, (Run.State.COMPLETED,), timeout=60)

    # The killed page left nothing: what was repriced is exactly what the ledger had committed.
    assert repriced_at_kill == committed["rows"] == checkpoint_at_kill.rows_done
    assert checkpoint_at_kill.pages_done == committed["pages"] < 6
    # Every product repriced exactly once, by this run; every page once, contiguous; the
    # checkpoint says what the ledger says.
    assert_repriced_once(django_query, run_id=str(run.id), percent="10", rows=6000, page_size=1000)
    attempts = attempt_statuses(django_query, str(run.id))
    assert attempts.count("timed_out") >= 1  # the killed page's attempt, taken back by the supervisor
    assert attempts.count("continued") == 5 and attempts[-1] == "succeeded"
    assert Step.objects.get(run=run).result == {"pages": 6, "rows": 6000}


@pytest.fixture
def stall(catalogue: None) -> Iterator[Callable[..., None]]:
    """Make one page hang in the database (see `stall_once`); removed after the test."""
    yield partial(stall_once, django_query)
    stall_remove(django_query)


def test_reprice__page_misses_its_deadline__not_applied__taken_back__each_page_once(
    engine: Any, demo_user: Any, long_worker: Proc, stall: Callable[..., None]
) -> None:
    """A page that hangs past its attempt's complete-by (here in a statement: a lock wait, a bad
    plan) holds the step's row, so neither the supervisor nor another claim can take it while
    its transaction is open. The database ends that transaction at complete-by (the page set
    its statement and idle timeouts to the time left), the Celery soft time limit stops the
    agent; either way the page's effect rolls back and the supervisor takes the step back at
    its next sweep. The stall (10 minutes) outlasts this test: only those deadlines end it."""
    catalogue_seed(rows=4000)
    first = Product.objects.aggregate(first=Min("id"))["first"]
    stall(product_id=first + 2500, seconds=600)  # midway through the third page
    log_offset = len(long_worker.log())
    run = reprice_submit(owner_id=demo_user.id, by_staff=True, percent="10")
    lease = wait_for(
        lambda: stalled_lease(django_query, str(run.id)),
        timeout=30,
        interval=0.1,
        what="the third page to hang",
    )

    run = wait_run(run.id, (Run.State.COMPLETED,), timeout=60)

    assert_repriced_once(django_query, run_id=str(run.id), percent="10", rows=4000, page_size=1000)
    hung = TaskExecutionHistory.objects.get(run=run, kind="attempt", lease=lease)
    assert hung.status == "timed_out"
    taken = TaskExecutionHistory.objects.get(run=run, kind="supervisor", detail__failed_lease=lease)
    assert taken.detail["cause"] == "timed_out"
    statuses = attempt_statuses(django_query, str(run.id))
    assert statuses.count("continued") == 3 and statuses[-1] == "succeeded", statuses
    assert Step.objects.get(run=run).result == {"pages": 4, "rows": 4000}
    log = long_worker.log()[log_offset:]
    assert "page ran past its deadline" in log or "page ran into its time limit" in log, log[-3000:]


def test_reprice__worker_frozen_mid_page__the_database_ends_the_page__taken_back__each_page_once(
    engine: Any, demo_user: Any, long_worker: Proc, catalogue: None
) -> None:
    """A worker frozen (SIGSTOP) with a page's transaction open would hold the step's row, and
    keep the supervisor off it, for as long as it stays frozen. The page's idle timeout (the
    time left until complete-by) has the database end that transaction: the supervisor takes
    the step back while the worker is still frozen; resumed, the worker finds its page gone and
    writes nothing."""
    catalogue_seed(rows=4000)
    run = reprice_submit(owner_id=demo_user.id, by_staff=True, percent="10")
    wait_for(
        lambda: RepriceLedger.objects.filter(run_id=run.id).exists(), timeout=30, what="a page committed"
    )

    def freeze_mid_page() -> bool:
        wait_for(_page_open, timeout=10, interval=0.02, what="a page's transaction open")
        long_worker.kill(signal.SIGSTOP)
        if _page_open():  # frozen before the page could commit
            return True
        long_worker.kill(signal.SIGCONT)
        return False

    log_offset = len(long_worker.log())
    wait_for(freeze_mid_page, timeout=30, interval=0, what="the worker frozen mid-page")
    try:
        lease = str(Step.objects.get(run=run).lease)
        wait_for(
            lambda: TaskExecutionHistory.objects.filter(
                run=run, kind="supervisor", detail__failed_lease=lease
            ).exists(),
            timeout=30,
            what="the supervisor to take the frozen page's step back",
        )
        assert not _page_open()
        committed = RepriceLedger.objects.filter(run_id=run.id).count()
        assert Checkpoint.objects.get(run=run).pages_done == committed < 4
    finally:
        long_worker.kill(signal.SIGCONT)

    run = wait_run(run.id, (Run.State.COMPLETED,), timeout=60)

    assert_repriced_once(django_query, run_id=str(run.id), percent="10", rows=4000, page_size=1000)
    frozen = TaskExecutionHistory.objects.get(run=run, kind="attempt", lease=lease)
    assert frozen.status == "timed_out"
    statuses = attempt_statuses(django_query, str(run.id))
    assert statuses.count("continued") == 3 and statuses[-1] == "succeeded", statuses
    # Resumed, the worker met its page's end: the database's (its session ended) or its own
    # Celery soft time limit, whichever it noticed first.
    log = long_worker.log()[log_offset:]
    assert "page ran past its deadline" in log or "page ran into its time limit" in log, log[-3000:]


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_export__heartbeats_carry_it_past_its_first_window__its_file_for_its_owner_only(
    engine: Any, demo_user: Any, long_worker: Proc, artifacts_dir: Path
) -> None:
    export = export_request(owner_id=demo_user.id)
    run = wait_run(export.run_id, (Run.State.COMPLETED,), timeout=30)

    (attempt,) = TaskExecutionHistory.objects.filter(run=run, kind="attempt")
    first_window_end = attempt.detail["complete_by"]
    assert attempt.status == "succeeded"
    # It ran 5 s, past the deadline it was claimed with: only the heartbeats kept it alive, in
    # one attempt.
    assert attempt.ended_at.isoformat() > first_window_end
    assert attempt.ended_at - attempt.started_at >= timedelta(seconds=5)
    status = HeartbeatStatus.objects.get(run=run)
    assert status.status == "completed" and status.heartbeats >= 8
    export.refresh_from_db()
    assert export.completed_at is not None and str(export.lease) == str(attempt.lease)

    mallory = get_user_model().objects.create(username="mallory")
    owner, other = _client(demo_user), _client(mallory)  # the pages (session)
    owner_api, other_api = token_client(demo_user), token_client(mallory)  # the API (token)
    download = owner.get(f"/exports/{export.pk}/download/")
    assert download.status_code == 200 and download["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(download.content.decode())))
    assert rows[0][:3] == ["run_id", "workflow", "step"] and len(rows) == export.rows + 1
    assert any(r[1] == "exports.history_csv" for r in rows[1:])
    (artifacts_dir / "export-history.csv").write_bytes(download.content)
    assert owner_api.get(f"/api/exports/{export.pk}/").json()["status"] == "completed"
    assert owner_api.get(f"/api/exports/{export.pk}/download/").content == download.content
    assert owner_api.get(f"/api/runs/{run.pk}/progress/").json()["heartbeats"][0]["status"] == "completed"
    assert owner.get(f"/api/runs/{run.pk}/progress/").status_code == 200  # the pages poll it

    # User B never sees user A's export, its file or its run's progress: 404s, not 403s.
    assert other.get(f"/exports/{export.pk}/download/").status_code == 404
    assert other_api.get(f"/api/exports/{export.pk}/download/").status_code == 404
    assert other_api.get(f"/api/exports/{export.pk}/").status_code == 404
    assert other_api.get(f"/api/runs/{run.pk}/progress/").status_code == 404
    assert other.get(f"/api/runs/{run.pk}/progress/").status_code == 404
    assert other_api.get("/api/exports/").json() == {"results": []}
    assert str(export.pk) not in other.get("/exports/").content.decode()
    assert str(export.pk) in owner.get("/exports/").content.decode()


def test_export__worker_frozen__supervisor_takes_it_back__resumed_worker_writes_nothing(
    engine: Any, demo_user: Any, long_worker: Proc
) -> None:
    export = export_request(owner_id=demo_user.id)
    assert export.run_id is not None
    run_id = str(export.run_id)
    frozen = wait_for(
        lambda: HeartbeatStatus.objects.filter(
            run_id=run_id, status="in_progress", heartbeats__gte=2
        ).first(),
        timeout=20,
        what="the export to heartbeat",
    )
    first_lease = str(frozen.lease)

    long_worker.kill(signal.SIGSTOP)
    try:
        expired = wait_for(
            lambda: TaskExecutionHistory.objects.filter(
                run_id=run_id, kind="supervisor", detail__failed_lease=first_lease
            ).first(),
            timeout=30,
            what="the supervisor to take the frozen export's step back",
        )
        last_beat = HeartbeatStatus.objects.get(run_id=run_id).last_heartbeat_at
    finally:
        long_worker.kill(signal.SIGCONT)

    # Taken back after the last heartbeat's window ran out, within about one sweep of it (a
    # busy 2-core machine gets generous slack; the bound that matters is "not before").
    assert expired.detail["cause"] == "timed_out"
    assert last_beat + timedelta(seconds=WINDOW) <= expired.started_at
    assert expired.started_at <= last_beat + timedelta(seconds=WINDOW + SWEEP + 8)

    run = wait_run(run_id, (Run.State.COMPLETED,), timeout=60)

    # The resumed worker's heartbeat was refused and recorded; it wrote nothing: the file is the
    # next attempt's, and there is one.
    stale = TaskExecutionHistory.objects.filter(
        run=run, kind="late_reply", detail__reply_lease=first_lease, detail__outcome="heartbeat"
    )
    wait_for(stale.exists, timeout=10, what="the resumed worker's refused heartbeat")
    export = Export.objects.get(pk=export.pk)
    assert export.lease is not None and str(export.lease) != first_lease
    assert ExportFile.objects.filter(export=export).count() == 1
    first_attempt = TaskExecutionHistory.objects.get(run=run, kind="attempt", lease=first_lease)
    assert first_attempt.status == "timed_out"
    assert "lease" in long_worker.log() and "stopped without effect" in long_worker.log()

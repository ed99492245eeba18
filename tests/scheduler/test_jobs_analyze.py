"""The dispatcher's ANALYZE of the hot tables after a burst (issue 29, item 5): by the tick that
drains what was due, once the runs written by all ticks since the last one reach the threshold,
at most once per interval across dispatchers, never when off."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from sasproject.redis_client import get_redis
from scheduler.dispatcher import tick
from scheduler.dispatcher.tick import ANALYZE_KEY

from .jobs_support import dispatch, make_due, new_job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _reltuples(table: str) -> float:
    """The planner's row count of `table`: what its last ANALYZE saw."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        return float(cursor.fetchone()[0])


@pytest.fixture
def burst(user: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    """Six due jobs, the run table analysed while it had no runs, no recent ANALYZE."""
    key = f"{settings.REDIS_PREFIX}{ANALYZE_KEY}"
    get_redis().delete(key, f"{key}:written")
    for i in range(6):
        make_due(new_job(user, name=f"j{i}"))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_run")
    assert _reltuples("scheduler_run") == 0
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_INTERVAL", 60.0)
    monkeypatch.setattr(tick, "_analyze_owed", False)
    return 6


def test_dispatch__burst_above_the_threshold__analyses_the_hot_tables(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 5)

    done = dispatch()

    assert done.started == burst and done.analyzed == 1
    assert _reltuples("scheduler_run") == burst  # after the tick's firing


def test_dispatch__analysed_within_the_interval__not_again(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 5)
    get_redis().set(f"{settings.REDIS_PREFIX}{ANALYZE_KEY}", "1", px=30_000)  # another dispatcher's

    done = dispatch()

    assert done.started == burst and done.analyzed == 0
    assert _reltuples("scheduler_run") == 0


def test_dispatch__off__no_analyse(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 0)

    done = dispatch()

    assert done.started == burst and done.analyzed == 0
    assert _reltuples("scheduler_run") == 0


def test_dispatch__below_the_threshold__counts_until_a_later_tick_reaches_it(burst, user, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 8)

    first = dispatch()
    assert first.started == burst and first.analyzed == 0
    assert _reltuples("scheduler_run") == 0
    for i in range(2):
        make_due(new_job(user, name=f"later{i}"))
    second = dispatch()

    assert second.started == 2 and second.analyzed == 1
    assert _reltuples("scheduler_run") == burst + 2


def test_dispatch__burst_not_over__analyses_only_the_tick_that_drains_it(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 1)

    first = dispatch(batch=2, max_batches=1)  # the tick's budget ends with rows still due
    assert first.started == 2 and not first.drained and first.analyzed == 0
    assert _reltuples("scheduler_run") == 0
    second = dispatch()

    assert second.started == burst - 2 and second.drained and second.analyzed == 1
    assert _reltuples("scheduler_run") == burst


def test_dispatch__burst_ends_with_the_tick_budget__the_next_idle_tick_analyses(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 1)

    fired = 0
    while fired < burst:  # ticks of one batch each: the budget, not the drain, ends every one
        tick_done = dispatch(batch=burst, max_batches=1)
        assert tick_done.started and not tick_done.drained and tick_done.analyzed == 0
        fired += tick_done.started
    idle = dispatch()

    assert idle.started == 0 and idle.drained and idle.analyzed == 1
    assert _reltuples("scheduler_run") == burst
    assert dispatch().analyzed == 0  # owed no more: idle ticks ask nothing

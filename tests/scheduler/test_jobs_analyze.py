"""The dispatcher's ANALYZE of the hot tables after a burst (issue 29, item 5): above the row
threshold, at most once per interval across dispatchers, never when off."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from sasproject.redis_client import get_redis
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
    get_redis().delete(f"{settings.REDIS_PREFIX}{ANALYZE_KEY}")
    for i in range(6):
        make_due(new_job(user, name=f"j{i}"))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduler_run")
    assert _reltuples("scheduler_run") == 0
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_INTERVAL", 30.0)
    return 6


def test_dispatch__burst_above_the_threshold__analyses_the_hot_tables(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 5)

    done = dispatch()

    assert done.started == burst and done.analyzed == 1
    # Analysed between two batches, once the runs written reached the threshold.
    assert 5 <= _reltuples("scheduler_run") <= burst


def test_dispatch__analysed_within_the_interval__not_again(burst, monkeypatch):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", 5)
    get_redis().set(f"{settings.REDIS_PREFIX}{ANALYZE_KEY}", "1", px=30_000)  # another dispatcher's

    done = dispatch()

    assert done.started == burst and done.analyzed == 0
    assert _reltuples("scheduler_run") == 0


@pytest.mark.parametrize("threshold", [0, 7])
def test_dispatch__off_or_below_the_threshold__no_analyse(burst, monkeypatch, threshold):
    monkeypatch.setitem(settings.SAS, "JOBS_ANALYZE_AFTER_ROWS", threshold)

    done = dispatch()

    assert done.started == burst and done.analyzed == 0
    assert _reltuples("scheduler_run") == 0

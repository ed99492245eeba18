"""scheduler/limits.py: the GCRA rate limiter on the real Redis, and the quotas under their
per-owner advisory lock with eight real concurrent clients (threads, each its own PostgreSQL
connection, through the API on committed data)."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from sasproject.tokens.services import api_token_rotate
from scheduler.limits import RateLimited, rate_take
from scheduler.models import Job, Run

CLIENTS = 8
_names = itertools.count()


def test_rate_take__a_burst_of_n_then_refused_naming_the_rate_with_the_wait(settings: Any) -> None:
    settings.SAS_RATES = {**settings.SAS_RATES, "export": "3/minute"}
    owner = 10_000_000 + next(_names)

    for _ in range(3):
        rate_take(scope="export", owner_id=owner)
    with pytest.raises(RateLimited) as refused:
        rate_take(scope="export", owner_id=owner)
    rate_take(scope="export", owner_id=owner + 1)  # another user's budget is their own

    assert "the limit is 3 per minute" in refused.value.message
    # One token every 20 s: the next is due in at most 20 s.
    assert refused.value.retry_after is not None and 1 <= refused.value.retry_after <= 20


def _client(prefix: str) -> tuple[Any, APIClient]:
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(username=f"{prefix}-{uuid.uuid4().hex[:8]}")
    token = api_token_rotate(user_id=user.pk)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return user, client


def _together(call: Callable[[int], int], n: int) -> Counter[int]:
    """`call(i)` in `n` threads released at once; the HTTP statuses they got."""
    barrier = threading.Barrier(n)
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            status = call(i)
            with lock:
                statuses[status] += 1
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return statuses


def test_active_jobs_quota__eight_concurrent_clients__never_past_it(live_db: None, settings: Any) -> None:
    from tests.jobs.conftest import job_body

    settings.SAS_RATES = {**settings.SAS_RATES, "job_write": "10000/minute"}
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "ACTIVE_JOBS": 5}
    user, client = _client("quota-jobs")

    def create(i: int) -> int:
        local = APIClient()
        local.credentials(HTTP_AUTHORIZATION=client._credentials["HTTP_AUTHORIZATION"])
        first = local.post("/api/jobs/", job_body(name=f"c{i}-a"), format="json").status_code
        second = local.post("/api/jobs/", job_body(name=f"c{i}-b"), format="json").status_code
        return first * 1000 + second

    pairs = _together(create, CLIENTS)
    statuses = Counter({201: 0, 429: 0})
    for pair, n in pairs.items():
        statuses[pair // 1000] += n
        statuses[pair % 1000] += n

    assert statuses == Counter({201: 5, 429: 2 * CLIENTS - 5}), statuses
    assert Job.objects.filter(owner=user).count() == 5


def test_runs_in_flight_quota__eight_concurrent_order_clients__never_past_it(
    live_db: None, engine_paused: None, settings: Any
) -> None:
    # engine_paused: the session engine, if running, would finish orders and free places.
    from tests.orders.conftest import ORDER

    settings.SAS_SUBMIT_RATE = "10000/minute"
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "RUNS_IN_FLIGHT": 5}
    user, client = _client("quota-runs")
    header = client._credentials["HTTP_AUTHORIZATION"]

    def submit(i: int) -> int:
        local = APIClient()
        local.credentials(HTTP_AUTHORIZATION=header)
        response = local.post("/api/orders/", ORDER, format="json")
        if response.status_code == 429:
            assert "runs in flight" in response.json()["detail"], response.json()
        return response.status_code

    statuses = _together(submit, CLIENTS)

    assert statuses == Counter({201: 5, 429: CLIENTS - 5}), statuses
    assert Run.objects.filter(owner=user, state__in=["pending", "running"]).count() == 5

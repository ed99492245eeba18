"""The Redis-backed circuit breaker's state machine, on the real Redis."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents.breaker import CircuitBreaker


@pytest.fixture
def breaker(redis_client):
    b = CircuitBreaker("unit-test", failure_threshold=3, reset_timeout=0.3, probe_timeout=0.5)
    b.reset()
    yield b
    b.reset()


def test_breaker__failures_below_threshold__stays_closed(breaker):
    breaker.record_failure()
    breaker.record_failure()
    assert breaker.allow().allowed
    assert breaker.snapshot()["state"] == "closed"


def test_breaker__success_resets_the_consecutive_count(breaker):
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.snapshot()["state"] == "closed"


def test_breaker__threshold_reached__opens_and_refuses_with_retry_after(breaker):
    for _ in range(3):
        breaker.record_failure()

    decision = breaker.allow()

    assert not decision.allowed and decision.state == "open"
    assert 0 < decision.retry_after <= 0.3


def test_breaker__after_reset_timeout__exactly_one_probe_then_closes_on_success(breaker):
    for _ in range(3):
        breaker.record_failure()
    time.sleep(0.35)

    with ThreadPoolExecutor(8) as pool:
        decisions = list(pool.map(lambda _: breaker.allow(), range(8)))

    assert sum(d.allowed for d in decisions) == 1  # one half-open probe among concurrent callers
    breaker.record_success()
    assert breaker.snapshot()["state"] == "closed"
    assert breaker.allow().allowed


def test_breaker__failed_probe__opens_again(breaker):
    for _ in range(3):
        breaker.record_failure()
    time.sleep(0.35)
    assert breaker.allow().state == "half_open"

    assert breaker.record_failure() == "open"
    assert not breaker.allow().allowed
    assert breaker.snapshot()["opened"] == "2"


@pytest.mark.parametrize("open_first", [False, True])
def test_breaker__allow_with_a_start_mark__sets_it_in_the_same_call(breaker, redis_client, open_first):
    from scheduler.attempts import attempt_start_mark, attempts_started

    if open_first:
        for _ in range(3):
            breaker.record_failure()
    lease = f"lease-{open_first}"
    mark = attempt_start_mark(lease=lease, ttl_seconds=5)

    decision = breaker.allow(mark=mark)

    assert decision.allowed is not open_first
    # Set whatever the breaker says: the attempt left the queue (the supervisor reads the mark).
    assert attempts_started(leases=[lease, "never-started"]) == {lease}
    assert 4000 < redis_client.pttl(mark.key) <= 5000
    redis_client.delete(mark.key)

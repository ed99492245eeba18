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

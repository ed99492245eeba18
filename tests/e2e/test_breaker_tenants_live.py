"""Breakers per tenant (issue 26, item 5) on the session's real workers, PostgreSQL, Redis and
simulator: customer B's failing HTTP-call jobs to a host opened the one `http.call` breaker of
that host, so customer A's healthy call to it was deferred (39-90 s in the issue). Now B's
failures open B's breaker for that host only; A's call goes through on its first attempt while
B's is open."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.contrib.auth import get_user_model

from agents.breaker import CircuitBreaker
from agents.http_call import HTTP_CALL_WORKFLOW
from sastools.harness import wait_for
from scheduler.models import Run, Step, TaskExecutionHistory
from scheduler.services import run_submit

from .helpers import wait_run


def _http_run(user: Any, url: str) -> Run:
    return run_submit(
        workflow=HTTP_CALL_WORKFLOW, input={"method": "POST", "url": url, "body": {"n": 1}}, owner_id=user.id
    )


def _open_http_breakers(client: redis.Redis) -> list[str]:
    """The names of the `http.call` breakers that are open now."""
    head = CircuitBreaker("").key
    names = []
    for key in client.scan_iter(f"{head}http*"):
        if client.hget(key, "state") == b"open":
            names.append(key.decode().removeprefix(head))
    return names


def test_http_breaker__b_failing_calls_to_a_host__as_call_to_it_not_deferred(
    engine: Any, demo_user: Any, redis_client: redis.Redis
) -> None:
    base = os.environ["SIMULATOR_URL"]
    netloc = urlsplit(base).netloc
    bob, _ = get_user_model().objects.get_or_create(username="bob")

    # B: more failing calls (503) than the breaker's threshold, to the simulator's host.
    threshold = settings.SAS["BREAKER_FAILURE_THRESHOLD"]
    for index in range(threshold + 1):
        _http_run(bob, f"{base}/echo/b{index}?status=503")
    (opened,) = wait_for(
        lambda: _open_http_breakers(redis_client), timeout=60, what="B's failures to open a breaker"
    )
    assert netloc in opened
    # Held open for the rest of the test (its own reset timeout is 2 s here): "while B's
    # breaker is open" is then a fact, not a race.
    CircuitBreaker(opened).force(state="open", seconds=120, by="test")

    # A: a healthy call to the same host.
    run = _http_run(demo_user, f"{base}/echo/a")
    (attempt,) = wait_for(
        lambda: list(
            TaskExecutionHistory.objects.filter(step__run=run, kind="attempt").exclude(status="started")
        ),
        timeout=30,
        what="A's first attempt's outcome",
    )

    assert attempt.status == "succeeded", (attempt.status, attempt.error)
    run = wait_run(run.id, (Run.State.COMPLETED,))
    (step,) = run.steps.filter(kind=Step.Kind.FORWARD)
    assert step.attempts == 1 and step.failure_count == 0 and step.result["status"] == 200
    assert len(engine.sim.ledger(service="echo", key=step.idempotency_key)) == 1
    # B's breaker is open all along, and it is B's alone.
    assert CircuitBreaker(opened).snapshot()["state"] == "open"
    assert _open_http_breakers(redis_client) == [opened]
    assert opened == f"http:{bob.id}:{netloc}"

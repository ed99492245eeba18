"""Issue 26, item 5 and item 7's header: an attempt whose call raises something other than a
TransientFault or PermanentFault (a bug, a value httpx cannot encode, a lost database) never
reported to the breaker, so a half-open probe held every caller of that service until its probe
timeout (30 s); and an `http.call` step stored with a non-ASCII header value crashed every
attempt. AgentTask.perform in-process on the real database, Redis and simulator."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
from celery import shared_task
from django.db import transaction

from agents.base import AgentTask
from agents.breaker import CircuitBreaker
from agents.http_call import HTTP_CALL_OPERATION, HTTP_CALL_WORKFLOW, http_call_operation
from agents.remote import close_http_client
from scheduler.models import Run, Step
from scheduler.services import run_submit, step_claim_due
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

BUGGY_OPERATION = "agents.bugtest.call"


class BuggyAgent(AgentTask):
    """An agent whose call has a bug: it raises a KeyError (counted, not retried)."""

    service = "bugtest"
    calls = 0

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        BuggyAgent.calls += 1
        return payload["missing"]


@shared_task(name=BUGGY_OPERATION, bind=True, base=BuggyAgent)
def buggy_call(self: BuggyAgent, **kwargs: Any) -> str:
    return self.perform(path="", **kwargs)


@pytest.fixture(autouse=True)
def _close_client():
    yield
    close_http_client()


@pytest.fixture
def quick_breakers(settings: Any) -> None:
    # A breaker that failed opens for 0.2 s, then lets one probe through.
    settings.SAS = {**settings.SAS, "BREAKER_RESET_TIMEOUT": 0.2, "BREAKER_FAILURE_THRESHOLD": 5}


def _claimed(run: Run, *, operation: str | None = None, payload: dict[str, Any] | None = None) -> Any:
    """The run's first step, claimed by the test (the engine's workers never see it)."""
    changes: dict[str, Any] = {}
    if operation is not None:
        changes["operation"] = operation
    if payload is not None:
        changes["payload"] = payload
    if changes:
        Step.objects.filter(run=run, seq=0).update(**changes)
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


def _buggy_claim(user: Any) -> Any:
    register_engine_workflow()
    run = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False)
    return _claimed(run, operation=BUGGY_OPERATION, payload={"x": 1})


def test_unexpected_error__counted_by_the_breaker_and_replied_transient(engine, demo_user, quick_breakers):
    breaker = CircuitBreaker("bugtest")
    breaker.reset()
    claim = _buggy_claim(demo_user)

    outcome = buggy_call.perform(path="", **claim.message())

    assert outcome == "accepted"
    assert breaker.snapshot()["failures"] == "1"
    step = Step.objects.get(pk=claim.step_id)
    # One failure counted, retried after backoff - not held Processing for its whole window.
    assert step.process_state == "pending" and step.failure_count == 1
    attempt = step.history.get(kind="attempt")
    assert attempt.status == "failed_transient" and "KeyError" in attempt.error


def test_unexpected_error_in_a_half_open_probe__probe_released_and_the_next_one_let_through(
    engine, demo_user, quick_breakers
):
    breaker = CircuitBreaker("bugtest")  # probe timeout 30 s: a probe never reported holds it 30 s
    breaker.reset()
    breaker.force(state="open", seconds=0.05, by="test")
    time.sleep(0.1)  # past its open time: the next call is the half-open probe
    claim = _buggy_claim(demo_user)
    calls = BuggyAgent.calls

    buggy_call.perform(path="", **claim.message())

    assert BuggyAgent.calls == calls + 1  # the attempt was the probe
    assert breaker.snapshot()["state"] == "open"  # its failure opened the breaker again
    # ... for the reset timeout (0.2 s), not the probe timeout (30 s): the next probe goes.
    for _ in range(100):
        decision = breaker.allow()
        if decision.allowed:
            break
        time.sleep(0.1)
    assert decision.allowed and decision.state == "half_open", decision


def test_http_call_stored_with_a_non_ascii_header__permanent_failure_without_a_call(engine, demo_user):
    """A step stored before the header rule (or written around it): no crash on every attempt,
    one permanent failure, and nothing sent."""
    url = os.environ["SIMULATOR_URL"] + "/echo/hook"
    run = run_submit(
        workflow=HTTP_CALL_WORKFLOW, input={"method": "GET", "url": url}, owner_id=demo_user.id, kick=False
    )
    claim = _claimed(
        run,
        operation=HTTP_CALL_OPERATION,
        payload={"method": "GET", "url": url, "headers": {"X-Name": "Müller"}, "owner_id": demo_user.id},
    )

    outcome = http_call_operation.perform(path="", **claim.message())

    assert outcome == "accepted"
    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "error" and step.error_permanent and step.attempts == 1
    assert "X-Name" in step.last_error and "visible ASCII" in step.last_error
    assert engine.sim.ledger(service="echo") == []

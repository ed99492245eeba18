"""Agents trust only the state store (issue 26, item 2), with the session engine's real workers.

An agent request is a Celery message anyone who can write to the broker - or who holds Flower's
login - can send. Before issue 26 the agent called the remote service with the message's own
payload and learnt only from its reply that no step held that lease: a refund of any charge, a
charge or a shipment could be made with no run and no audit entry. Now the agent loads the
payload, idempotency key and deadlines from the step (by id and lease, Processing, same
operation) before any call, and refuses anything else: logged, counted, nothing called. The
simulator's ledger is the witness: every effect a remote call had is an entry in it.
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery import current_app
from django.db import transaction
from django.utils import timezone

from liveness.counters import refused_key
from sasproject.redis_client import get_redis
from sastools.harness import procfile_process, wait_for
from scheduler import transitions
from scheduler.models import Run, Step
from scheduler.services import run_cancel, run_submit
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

from ..admin.test_admin_browser import _free_port
from ..ops.test_flower_live import _get
from .helpers import step, submit_order, wait_run

REFUSED = "refused: no step of this operation is Processing"
NO_STEP = 987_654_321
FLOWER_LOGIN = "ops:agent-trust-test"


def _later(seconds: float = 60) -> str:
    return (timezone.now() + timedelta(seconds=seconds)).isoformat()


def _forge(name: str, *, step_id: int, lease: str, payload: dict[str, Any], key: str) -> dict[str, Any]:
    """A well-formed agent request, sent through the broker as any client of it could."""
    kwargs = {
        "step_id": step_id,
        "lease": lease,
        "complete_by": _later(),
        "idempotency_key": key,
        "payload": payload,
        "attempt": 1,
    }
    current_app.send_task(name, kwargs=kwargs, ignore_result=True)
    return kwargs


def _refused(engine: Any, at: int) -> int:
    return engine.agents.log()[at:].count(REFUSED)


def _refused_counts() -> dict[str, int]:
    raw = get_redis().hgetall(refused_key())
    return {k.decode(): int(v) for k, v in raw.items()}


def _held_charge(user: Any, *, amount: str) -> Any:
    """A run of the engine's test workflow whose first step is a payment charge, claimed (Processing,
    a lease) by the test in the transaction that made it - no worker or tick sees it Pending -
    and never dispatched: only the messages this test sends reach an agent for it."""
    register_engine_workflow()
    with transaction.atomic():
        run = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False)
        Step.objects.filter(run=run, seq=0).update(
            operation="agents.payment.charge",
            payload={"amount": amount, "currency": "EUR", "card": "tok_ok"},
        )
        (claim,) = transitions.step_claim_many(instance="test", limit=1, run_id=run.id).claims
    return claim


@pytest.mark.both_brokers  # forged through Redis and through RabbitMQ
def test_forged_requests__no_step_wrong_lease_wrong_operation__no_remote_call(engine, demo_user):
    order = wait_run(submit_order(demo_user).run_id, (Run.State.COMPLETED,), timeout=60)
    charge = step(order.id, "charge_payment")
    ledger = engine.sim.ledger()
    counts = _refused_counts()
    at = len(engine.agents.log())

    # A refund of a real customer's charge, for a step that does not exist.
    _forge(
        "agents.payment.refund",
        step_id=NO_STEP,
        lease=str(uuid.uuid4()),
        payload={"charge_key": charge.idempotency_key},
        key="forged-refund",
    )
    # A shipment, for a step that does not exist.
    _forge(
        "agents.shipping.create",
        step_id=NO_STEP + 1,
        lease=str(uuid.uuid4()),
        payload={"order_id": "forged", "items": [{"sku": "SKU-1", "quantity": 1}]},
        key="forged-shipment",
    )
    # A charge on the real (finished) charge step of that order, under a made-up lease.
    _forge(
        "agents.payment.charge",
        step_id=charge.id,
        lease=str(uuid.uuid4()),
        payload={"amount": "999.00", "currency": "EUR", "card": "tok_ok"},
        key="forged-charge",
    )
    # The order's own last request replayed word for word: its lease is no longer held.
    _forge(
        "agents.payment.charge",
        step_id=charge.id,
        lease=str(charge.lease),
        payload=charge.payload or {},
        key=charge.idempotency_key,
    )

    # Each seen by an agent worker and refused (old code: each made its call instead).
    wait_for(
        lambda: _refused(engine, at) >= 4 or engine.sim.ledger() != ledger,
        timeout=60,
        what="the agents to refuse the forged requests",
    )
    assert engine.sim.ledger() == ledger
    wait_for(lambda: _refused(engine, at) >= 4, timeout=30, what="four refusals logged")
    # Counted (before it is logged), per operation: a metric an operator can alert on
    # (sas_agent_requests_refused).
    after = _refused_counts()
    for operation, forged in (
        ("agents.payment.refund", 1),
        ("agents.shipping.create", 1),
        ("agents.payment.charge", 2),
    ):
        field = f"{operation}|not_held"
        assert after.get(field, 0) - counts.get(field, 0) == forged, (field, after)
    assert "raised unexpected" not in engine.agents.log()[at:]
    assert engine.agents.alive()


@pytest.mark.both_brokers  # forged through Redis and through RabbitMQ
def test_held_step__wrong_lease_refused__altered_payload_ignored__cancelled_run_never_calls(
    engine, demo_user, manual_scheduler
):
    held = _held_charge(demo_user, amount="3.00")
    cancelled = _held_charge(demo_user, amount="4.00")
    ledger = engine.sim.ledger()
    at = len(engine.agents.log())

    # The held step, under a made-up lease.
    _forge(
        "agents.payment.charge",
        step_id=held.step_id,
        lease=str(uuid.uuid4()),
        payload={"amount": "999.00", "currency": "EUR", "card": "tok_ok"},
        key="forged-lease",
    )
    # The held step's real lease sent to another operation (a refund of someone's charge).
    _forge(
        "agents.payment.refund",
        step_id=held.step_id,
        lease=held.lease,
        payload={"charge_key": "someone-else:charge_payment"},
        key="forged-operation",
    )
    # A run cancelled while its step's request waits in the queue: that request never calls.
    run_cancel(run_id=cancelled.run_id, actor="test")
    assert Step.objects.get(pk=cancelled.step_id).process_state == Step.State.CANCELLED
    current_app.send_task("agents.payment.charge", kwargs=cancelled.message(), ignore_result=True)
    # The held step's real lease with the payload and key altered in the message: the agent
    # sends what the step holds (3.00 under the step's key), and the step completes.
    altered = {
        **held.message(),
        "payload": {"amount": "999.00", "currency": "EUR", "card": "tok_ok"},
        "idempotency_key": "attacker-key",
        "complete_by": _later(3600),
    }
    current_app.send_task("agents.payment.charge", kwargs=altered, ignore_result=True)

    wait_for(
        lambda: Step.objects.get(pk=held.step_id).process_state == Step.State.PROCESSED,
        timeout=60,
        what="the held step's real request to complete",
    )
    wait_for(
        lambda: _refused(engine, at) >= 3 or len(engine.sim.ledger()) > len(ledger) + 1,
        timeout=60,
        what="the forged requests to be refused",
    )
    new = [entry for entry in engine.sim.ledger() if entry not in ledger]
    assert [(e["service"], e["operation"], e["key"]) for e in new] == [
        ("payment", "charge", held.idempotency_key)
    ], new
    assert new[0]["payload"]["amount"] == "3.00"
    assert _refused(engine, at) == 3
    assert Step.objects.get(pk=cancelled.step_id).process_state == Step.State.CANCELLED


@pytest.mark.both_brokers  # forged through Redis and through RabbitMQ
def test_reply_for_unknown_step__dropped_and_logged__worker_keeps_going(engine, demo_user):
    at = len(engine.control.log())
    for outcome in ("success", "continue", "permanent", "transient"):
        current_app.send_task(
            "scheduler.reply",
            kwargs={"step_id": NO_STEP, "lease": str(uuid.uuid4()), "outcome": outcome},
            queue="scheduler",
            ignore_result=True,
        )

    wait_for(
        lambda: (
            engine.control.log()[at:].count(f"reply for step {NO_STEP} dropped: no such step") >= 4
            or "raised unexpected" in engine.control.log()[at:]
        ),
        timeout=60,
        what="the four replies to be dropped",
    )
    log = engine.control.log()[at:]
    assert "raised unexpected" not in log, log[-4000:]
    assert log.count(f"reply for step {NO_STEP} dropped: no such step") == 4
    wait_run(submit_order(demo_user).run_id, (Run.State.COMPLETED,), timeout=60)


# ---------------------------------------------------------------------------------------------
# Flower, as the Procfile runs it: its login can no longer send tasks or stop workers, and its
# /metrics asks for the login.
# ---------------------------------------------------------------------------------------------


def _post(url: str, body: dict[str, Any], *, auth: str | None = FLOWER_LOGIN) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _up(url: str) -> bool:
    try:
        return _get(url, auth=None)[0] == 200
    except OSError:  # not listening yet
        return False


@pytest.fixture
def procfile_flower(engine: Any, tmp_path: Path) -> Any:
    port = _free_port()
    env = {**engine.env, "FLOWER_PORT": str(port), "FLOWER_BASIC_AUTH": FLOWER_LOGIN}
    proc = procfile_process("flower", log_dir=tmp_path, env=env).start(ready_marker=None)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _up(f"{base}/healthcheck"), timeout=60, what="Flower to answer")
        yield base
    finally:
        proc.stop()


def test_flower__cannot_send_tasks_or_stop_workers__metrics_need_the_login(
    engine, demo_user, procfile_flower
):
    base = procfile_flower
    order = wait_run(submit_order(demo_user).run_id, (Run.State.COMPLETED,), timeout=60)
    charge = step(order.id, "charge_payment")
    ledger = engine.sim.ledger()
    refund = {
        "kwargs": {
            "step_id": NO_STEP,
            "lease": str(uuid.uuid4()),
            "complete_by": _later(),
            "idempotency_key": "flower-refund",
            "payload": {"charge_key": charge.idempotency_key},
        }
    }

    # The shared login sends nothing and stops nothing (old: 200, the refund made).
    assert _post(f"{base}/api/task/async-apply/agents.payment.refund", refund) == 403
    assert _post(f"{base}/api/task/apply/agents.payment.refund", refund) == 403
    assert _post(f"{base}/api/task/send-task/agents.payment.refund", refund) == 403
    assert _post(f"{base}/api/task/revoke/{uuid.uuid4()}?terminate=true", {}) == 403
    assert _post(f"{base}/api/worker/shutdown/{engine.agents.name}@x", {}) == 403
    assert _post(f"{base}/api/worker/pool/shrink/{engine.agents.name}@x", {}) == 403
    # Reading still works with the login, not without.
    assert _get(f"{base}/api/workers", auth=FLOWER_LOGIN)[0] == 200
    assert _get(f"{base}/api/workers", auth=None)[0] == 401
    # /metrics: the login, like every page (old: 200 to anyone).
    assert _get(f"{base}/metrics", auth=None)[0] == 401
    assert _get(f"{base}/metrics", auth="ops:wrong")[0] == 401
    status, body = _get(f"{base}/metrics", auth=FLOWER_LOGIN)
    assert status == 200 and b"flower_events_total" in body

    # The same refund sent straight to the broker behind it is refused by the agent; once that
    # refusal is logged, the ledger shows that no call was made at all.
    at = len(engine.agents.log())
    current_app.send_task("agents.payment.refund", kwargs=refund["kwargs"], ignore_result=True)
    wait_for(lambda: _refused(engine, at) >= 1, timeout=60, what="the agent to refuse the refund")
    assert engine.sim.ledger() == ledger
    assert engine.agents.alive()

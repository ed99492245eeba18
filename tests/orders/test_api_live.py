"""API behaviour that needs committed data and real concurrency: racing idempotent POSTs (each
request on its own thread and database connection) and cancelling a run the workers are running."""

from __future__ import annotations

import threading
from typing import Any

from django.db import connection, transaction
from rest_framework.response import Response

from orders.models import Order
from sastools.harness import wait_for
from scheduler.models import Run, Step

from ..e2e.helpers import wait_run, wait_step_state
from .conftest import ORDER, make_user, token_client

URL = "/api/orders/"


def _lock_waits() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


def test_post_order__same_idempotency_key_raced__one_order(live_db: None) -> None:
    """Both requests pass the "already there?" check before either commits: the unique constraint
    makes the second wait for the first, fail, and return the first order."""
    user = make_user("race")
    first_inserted, release = threading.Event(), threading.Event()
    results: dict[str, Response] = {}

    def first() -> None:
        try:
            with transaction.atomic():  # keeps the first order uncommitted until released
                results["first"] = token_client(user).post(
                    URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="k"
                )
                first_inserted.set()
                release.wait(15)
        finally:
            connection.close()

    def second() -> None:
        try:
            results["second"] = token_client(user).post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="k")
        finally:
            connection.close()

    t1 = threading.Thread(target=first)
    t1.start()
    assert first_inserted.wait(15)
    t2 = threading.Thread(target=second)
    t2.start()
    wait_for(lambda: _lock_waits() >= 1, timeout=15, what="the second insert to wait on the unique index")
    release.set()
    t1.join(15)
    t2.join(15)

    assert results["first"].status_code == 201, results["first"].content
    assert results["second"].status_code == 200, results["second"].content
    assert results["first"].json()["id"] == results["second"].json()["id"]
    assert Order.objects.filter(owner=user).count() == 1
    assert Run.objects.filter(owner=user).count() == 1


def test_post_order__identical_posts_concurrently__one_order(live_db: None) -> None:
    user = make_user("race")
    clients = [token_client(user) for _ in range(6)]
    barrier = threading.Barrier(len(clients))
    responses: list[Response] = []
    lock = threading.Lock()

    def post(client: Any) -> None:
        try:
            barrier.wait(10)
            response = client.post(URL, ORDER, format="json", HTTP_IDEMPOTENCY_KEY="same-key")
            with lock:
                responses.append(response)
        finally:
            connection.close()

    threads = [threading.Thread(target=post, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)

    assert sorted(r.status_code for r in responses) == [200] * 5 + [201]
    assert len({r.json()["id"] for r in responses}) == 1
    assert Order.objects.filter(owner=user).count() == 1
    assert Run.objects.filter(owner=user).count() == 1


def test_cancel_order__running__completed_steps_compensated(engine: Any) -> None:
    engine.sim.set_faults("payment", hang=True)
    client = token_client(make_user("cancel"))
    order_id = client.post(URL, ORDER, format="json").json()["id"]
    run_id = Order.objects.get(pk=order_id).run_id
    wait_step_state(run_id, "charge_payment", Step.State.PROCESSING)

    response = client.post(f"{URL}{order_id}/cancel/")
    engine.sim.set_faults("payment", hang=False)
    run = wait_run(run_id, (Run.State.CANCELLED,), timeout=30)

    assert response.status_code == 200 and response.json()["state"] == "compensating"
    steps = {s.name: s.process_state for s in run.steps.all()}
    assert steps["reserve_inventory"] == Step.State.COMPENSATED
    assert steps["release_inventory"] == Step.State.PROCESSED
    assert steps["create_shipment"] == Step.State.CANCELLED
    assert len(engine.sim.ledger(service="inventory", operation="release")) == 1
    assert engine.sim.ledger(service="shipping") == []
    assert client.get(f"{URL}{order_id}/").json()["events"][-1]["type"] == "cancelled"


def _wait_failures(run_id: Any, step_name: str, failures: int) -> None:
    wait_for(
        lambda: Step.objects.filter(run_id=run_id, name=step_name, failure_count__gte=failures).exists(),
        timeout=30,
        what=f"{step_name} to fail {failures} times",
    )


def test_get_order__step_failed_twice_then_succeeded__every_attempts_reason_kept(engine: Any) -> None:
    """The payment service answers 503 until two attempts have failed (the second fails fast on
    the breaker those 503s opened, which also holds the third attempt back for the breaker's
    reset time); then it recovers and the third attempt succeeds. The detail keeps why the first
    two failed, whatever the step row's last_error says now."""
    engine.sim.set_faults("payment", transient_rate=1.0)
    client = token_client(make_user("retry"))
    order_id = client.post(URL, ORDER, format="json").json()["id"]
    run_id = Order.objects.get(pk=order_id).run_id
    _wait_failures(run_id, "charge_payment", 2)
    engine.sim.clear_faults()
    wait_run(run_id, (Run.State.COMPLETED,), timeout=30)

    body = client.get(f"{URL}{order_id}/").json()

    charge = next(s for s in body["steps"] if s["name"] == "charge_payment")
    history = charge["attempt_history"]
    assert charge["failure_count"] == 2 and charge["label"] == "Charge the card"
    assert [a["attempt"] for a in history] == list(range(1, len(history) + 1))
    # Two attempts reached the service and failed; while its breaker was open, later attempts
    # were deferred (they cost no failure), until one succeeded.
    statuses = [a["status"] for a in history]
    assert statuses[:2] == ["failed_transient", "failed_transient"] and statuses[-1] == "succeeded"
    assert set(statuses[2:-1]) <= {"deferred"}
    assert history[0]["error"].startswith("payment answered 503")
    unavailable = "The payment service was not available at that moment."
    assert [a["reason"] for a in history] == [unavailable] * (len(history) - 1) + [""]
    assert all(a["ended_at"] for a in history)
    assert body["progress"] == {"done": 3, "total": 3, "undone": 0, "to_undo": 0}

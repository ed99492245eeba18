"""Celery messages sent straight to the engine's queues, past every API (issue 22, "Bad input,
tried for real"): wrong types, unknown fields, unknown step ids, forged and replayed leases,
oversized payloads, a task name that does not exist, a body that is not JSON, a pickle.

Each reaches a real worker of the session engine and is refused with a log line; no worker
crashes (a normal order completes afterwards on the same workers) and no row changes - except
the one `late_reply` history row the lease fence writes for each well-formed reply it refuses,
which is its audit trail. A replayed agent request is refused by the agent before any call, its
deadline past or not: no step holds its lease any more (issue 26, tests/e2e/test_agent_trust_live.py).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from celery import current_app
from django.db import connection
from django.utils import timezone
from kombu import Connection, Exchange, Producer

from sastools.harness import wait_for
from scheduler.models import Run, TaskExecutionHistory

from .helpers import step, submit_order, wait_run

TABLES = (
    "orders_order",
    "scheduler_run",
    "scheduler_step",
    "scheduler_runevent",
    "scheduler_taskexecutionhistory",
)


def _rows(table: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {table} ORDER BY 1")
        return [tuple(str(v) for v in row) for row in cursor.fetchall()]


def _snapshot() -> dict[str, list[tuple[Any, ...]]]:
    return {table: _rows(table) for table in TABLES}


def _send(name: str, queue: str, **kwargs: Any) -> None:
    current_app.send_task(name, kwargs=kwargs, queue=queue, ignore_result=True)


def _send_raw(queue: str, body: bytes, *, content_type: str, headers: dict[str, Any]) -> None:
    """A message built by hand (kombu), as a foreign client or an attacker with broker access would."""
    with Connection(
        current_app.conf.broker_url, transport_options=current_app.conf.broker_transport_options
    ) as conn:
        producer = Producer(conn.channel())
        producer.publish(
            body,
            exchange=Exchange(queue, type="direct"),
            routing_key=queue,
            content_type=content_type,
            content_encoding="utf-8" if content_type != "application/x-python-serialize" else "binary",
            headers=headers,
            serializer=None,
        )


def _task_headers(name: str) -> dict[str, Any]:
    return {"lang": "py", "task": name, "id": str(uuid.uuid4()), "argsrepr": "()", "kwargsrepr": "{}"}


def test_forged_messages__refused_and_logged__no_crash_no_state_change(engine, demo_user):
    first = wait_run(submit_order(demo_user).run_id, (Run.State.COMPLETED,), timeout=40)
    reserve = step(first.id, "reserve_inventory")
    ledger_before = engine.sim.ledger()
    before = _snapshot()
    control_at, agents_at = len(engine.control.log()), len(engine.agents.log())
    real = {"step_id": reserve.id, "lease": str(reserve.lease)}
    later = (timezone.now() + timedelta(seconds=30)).isoformat()
    request = {
        **real,
        "complete_by": later,
        "idempotency_key": reserve.idempotency_key,
        "payload": reserve.payload,
        "attempt": 1,
    }

    # -- replies to the scheduler queue -----------------------------------------------------
    reply = "scheduler.reply"
    _send(reply, "scheduler", step_id="abc", lease=str(uuid.uuid4()), outcome="success")
    _send(reply, "scheduler", step_id=reserve.id, lease="not-a-uuid", outcome="success")
    _send(reply, "scheduler", step_id=reserve.id, lease=str(uuid.uuid4()), outcome="win")
    _send(reply, "scheduler", **real, outcome="success", result="x" * (3 * 1024 * 1024))
    _send(reply, "scheduler", **real, outcome="success", evil=True)
    _send(reply, "scheduler", step_id=2**70, lease=str(uuid.uuid4()), outcome="permanent")
    _send(
        reply, "scheduler", step_id=reserve.id, lease=str(uuid.uuid4()), outcome="success", retry_after="soon"
    )
    current_app.send_task(reply, args=[reserve.id, str(reserve.lease), "success"], queue="scheduler")
    # Well-formed, fenced: a replayed lease (the step is Processed), a forged lease, a step
    # that does not exist. Each: "ignored" by the service.
    _send(reply, "scheduler", **real, outcome="success", result={"replayed": True})
    _send(
        reply, "scheduler", step_id=reserve.id, lease=str(uuid.uuid4()), outcome="permanent", error="forged"
    )
    _send(reply, "scheduler", step_id=987654321, lease=str(uuid.uuid4()), outcome="transient")

    # -- agent requests to an agent queue ---------------------------------------------------
    op, agent_q = "agents.inventory.reserve", "agent.inventory"
    _send(op, agent_q, **{**request, "complete_by": 123})
    _send(op, agent_q, **{**request, "step_id": "1; DROP TABLE scheduler_step"})
    _send(op, agent_q, **{**request, "payload": ["not", "an", "object"]})
    _send(op, agent_q, **{**request, "payload": {"blob": "y" * (3 * 1024 * 1024)}})
    _send(op, agent_q, **{**request, "path": "/payment/charge"})
    _send(op, agent_q, **{**request, "complete_by": "2026-01-01T00:00:00"})  # no zone
    # Replayed, expired or with a live deadline: refused by the agent, which finds no step held
    # under that lease (issue 26) - no call, no reply.
    _send(op, agent_q, **{**request, "complete_by": (timezone.now() - timedelta(seconds=5)).isoformat()})
    _send(op, agent_q, **request)

    # -- names and bodies that are not ours -------------------------------------------------
    _send("scheduler.does_not_exist", "scheduler", step_id=1)
    _send("agents.inventory.steal", agent_q, **request)
    _send_raw(
        "scheduler", b"{not json", content_type="application/json", headers=_task_headers("scheduler.kick")
    )
    _send_raw(
        "scheduler",
        b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00K\x01.",
        content_type="application/x-python-serialize",
        headers=_task_headers("scheduler.kick"),
    )
    _send_raw("scheduler", b'{"hello": "world"}', content_type="application/json", headers={})

    # Each one seen and refused, in the workers' logs.
    control_expected = [
        ("reply for step 'abc' dropped: step_id: not a positive integer", 1),
        ("dropped: lease: not a UUID", 1),
        ("dropped: outcome: not one of", 1),
        ("dropped: result: 3145730 bytes, over the limit of 2097152", 1),
        ("dropped: unknown fields ['evil']", 1),
        (f"reply for step {2**70} dropped: step_id: not a positive integer", 1),
        ("dropped: retry_after: not a number >= 0", 1),
        ("dropped: positional arguments", 1),
        ("Received unregistered task of type 'scheduler.does_not_exist'", 1),
        (("Received invalid task message", "Can't decode message body"), 2),
        ("Received and deleted unknown message", 1),
    ]
    agents_expected = [
        ("dropped: complete_by: not an ISO 8601 date-time", 1),
        ("dropped: step_id: not a positive integer", 1),
        ("dropped: payload: not an object", 1),
        ("dropped: payload: 3145740 bytes, over the limit of 2097152", 1),
        ("dropped: unknown fields ['path']", 1),
        ("dropped: complete_by: no time zone", 1),
        ("refused: no step of this operation is Processing under lease", 2),
        ("Received unregistered task of type 'agents.inventory.steal'", 1),
    ]

    def seen(proc: Any, at: int, expected: list[tuple[Any, int]]) -> list[Any]:
        """What is not (yet) logged; a tuple: any of these lines (Celery words a body it cannot
        decode one way or the other, depending on where it fails)."""
        log = proc.log()[at:]
        return [
            text
            for text, count in expected
            if sum(log.count(t) for t in (text if isinstance(text, tuple) else (text,))) < count
        ]

    for proc, at, expected in (
        (engine.control, control_at, control_expected),
        (engine.agents, agents_at, agents_expected),
    ):
        try:
            wait_for(lambda: not seen(proc, at, expected), timeout=60, what=f"{proc.name}'s refusals")  # noqa: B023
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: not logged {seen(proc, at, expected)}\n{proc.log()[at:][-8000:]}"
            ) from None
    late = TaskExecutionHistory.Kind.LATE_REPLY
    # The fence's audit rows: the two forged replies on the real step.
    wait_for(
        lambda: TaskExecutionHistory.objects.filter(kind=late).count() >= 2, timeout=30, what="fenced replies"
    )

    # No crash: both workers alive, and a normal order completes on them.
    assert engine.control.alive() and engine.agents.alive()
    second = wait_run(submit_order(demo_user).run_id, (Run.State.COMPLETED,), timeout=60)

    # No state change: every row of the first order as it was; the history holds, beyond the
    # second order's rows, only the fence's ignored replies.
    after = _snapshot()
    for table in ("orders_order", "scheduler_run", "scheduler_step", "scheduler_runevent"):
        second_rows = [row for row in after[table] if str(second.id) in row]
        old = [row for row in after[table] if row not in second_rows]
        assert old == before[table], table
    history = TaskExecutionHistory.objects.exclude(step__run_id=second.id).exclude(kind=late)
    assert history.count() == len(before["scheduler_taskexecutionhistory"])
    ignored = TaskExecutionHistory.objects.filter(kind=late).order_by("id")
    assert ignored.count() == 2 and {row.status for row in ignored} == {TaskExecutionHistory.Status.IGNORED}
    assert {row.step_id for row in ignored} == {reserve.id}
    # The remote service saw no second effect: the first order's ledger entries are unchanged.
    first_entries = [e for e in engine.sim.ledger() if str(e.get("key", "")).startswith(f"{first.id}:")]
    assert first_entries == [e for e in ledger_before if str(e.get("key", "")).startswith(f"{first.id}:")]
    # No task raised: every refusal above is a logged decision, not a crash inside a task.
    for proc, at in ((engine.control, control_at), (engine.agents, agents_at)):
        assert "raised unexpected" not in proc.log()[at:], proc.log()[at:][-4000:]

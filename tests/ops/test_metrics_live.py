"""/metrics after a scripted run on real worker processes: every figure parsed with
prometheus_client's own parser and checked against the database (issue 19).

The session engine's agent worker and a second one started here (two worker processes, each
with its own pool) consume the agent queues; the counters they add to in Redis must add up to
what the engine's tables say.
"""

from __future__ import annotations

import base64
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from alerting.models import Alert
from liveness import counters as engine_metrics
from ops import metrics as ops_metrics
from sastools.harness import AGENT_QUEUES, wait_for
from scheduler.models import Run, TaskExecutionHistory

from ..e2e.helpers import submit_order, wait_run

TOKEN = "test-metrics-token"
DOCKER = Path(__file__).resolve().parents[2] / "docker"
# An attempt's history status -> the outcome its agent replied.
STATUS_OUTCOME = {
    "succeeded": "success",
    "failed_permanent": "permanent",
    "failed_transient": "transient",
    "deferred": "deferred",
}


@pytest.fixture
def metrics_settings(settings: Any) -> None:
    settings.SAS_MONITORING = {
        **settings.SAS_MONITORING,
        "METRICS_TOKEN": TOKEN,
        "METRICS_BASIC_AUTH": "prom:secret",
    }


def _clear_metric_keys(redis_client: Any) -> None:
    runs = f"{settings.REDIS_PREFIX}sas:metrics:runs_finished"
    redis_client.delete(
        engine_metrics.attempts_key(), engine_metrics.supervisor_key(), runs, f"{runs}:going", f"{runs}:lock"
    )


def scrape(client: Client) -> dict[str, list[Any]]:
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples: dict[str, list[Any]] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        samples.setdefault(f"family:{family.name}", [])
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def value(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    found = [s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {found}"
    return float(found[0])


def total(samples: dict[str, list[Any]], name: str, **labels: str) -> float:
    return sum(s.value for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items()))


def test_metrics__no_or_wrong_credentials__401(live_db: None, metrics_settings: None) -> None:
    client = Client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics").headers["WWW-Authenticate"] == 'Basic realm="metrics"'
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 401
    bad = base64.b64encode(b"prom:wrong").decode()
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {bad}").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Basic !!!").status_code == 401
    good = base64.b64encode(b"prom:secret").decode()
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Basic {good}").status_code == 200
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_metrics__nothing_configured__refuses_everyone(live_db: None, settings: Any) -> None:
    settings.SAS_MONITORING = {**settings.SAS_MONITORING, "METRICS_TOKEN": "", "METRICS_BASIC_AUTH": ""}
    client = Client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401


def test_metrics__scripted_run_on_two_workers__every_figure_matches_the_database(
    engine: Any,
    demo_user: Any,
    start_worker: Any,
    redis_client: Any,
    metrics_settings: None,
    monkeypatch: Any,
) -> None:
    _clear_metric_keys(redis_client)
    second = start_worker(name="agents-metrics", queues=AGENT_QUEUES, concurrency=2)
    client = Client()
    # Both workers heartbeat for every agent queue.
    wait_for(
        lambda: value(scrape(client), "sas_queue_consumers", queue="agent.payment") >= 2,
        timeout=20,
        what="two consumers of agent.payment",
    )

    orders = [submit_order(demo_user) for _ in range(8)] + [
        submit_order(demo_user, card="tok_decline") for _ in range(3)
    ]
    run_ids = [o.run_id for o in orders]
    wait_for(
        lambda: Run.objects.filter(pk__in=run_ids, state__in=Run.TERMINAL_STATES).count() == len(run_ids),
        timeout=60,
        what="every order to end",
    )
    assert second.alive()

    # The replies record the outcome before the agent counts it; wait until the counters
    # caught up with every attempt the history holds.
    def attempts_in_db() -> Counter[tuple[str, str]]:
        rows = TaskExecutionHistory.objects.filter(run_id__in=run_ids, kind="attempt").values_list(
            "step__operation", "status"
        )
        return Counter((op, STATUS_OUTCOME.get(status, status)) for op, status in rows)

    expected = attempts_in_db()
    samples = wait_for(
        lambda: (s := scrape(client)) and total(s, "sas_step_attempts_total") >= sum(expected.values()) and s,
        timeout=20,
        what="the attempt counters",
    )
    expected = attempts_in_db()

    # Two worker processes did the work (the history names the process that held each attempt).
    workers = set(
        TaskExecutionHistory.objects.filter(run_id__in=run_ids, kind="attempt").values_list(
            "worker", flat=True
        )
    )
    assert len(workers) >= 2, workers

    # Runs by final state, per workflow: the tail counted at scrape time...
    in_db = Counter(Run.objects.filter(pk__in=run_ids).values_list("state", flat=True))
    assert in_db["compensated"] == 3 and in_db["completed"] == 8
    for state in Run.TERMINAL_STATES:
        assert value(
            samples, "sas_runs_finished_total", workflow="order_fulfilment", state=state
        ) == in_db.get(state, 0)
    for state in Run.UNFINISHED_STATES:
        assert value(samples, "sas_runs", workflow="order_fulfilment", state=state) == 0
    # ... and the same once they are folded into the stored totals (settle time 0).
    monkeypatch.setattr(ops_metrics, "RUNS_SETTLE_SECONDS", 0.0)
    time.sleep(0.01)
    folded = scrape(client)
    assert redis_client.hget(f"{settings.REDIS_PREFIX}sas:metrics:runs_finished", "_cutoff") is not None
    for state in Run.TERMINAL_STATES:
        assert value(
            folded, "sas_runs_finished_total", workflow="order_fulfilment", state=state
        ) == in_db.get(state, 0)
    again = scrape(client)  # nothing counted twice
    for state in Run.TERMINAL_STATES:
        assert value(again, "sas_runs_finished_total", workflow="order_fulfilment", state=state) == in_db.get(
            state, 0
        )

    # Attempts by operation and outcome, exactly as the history has them.
    counted = Counter(
        {
            (s.labels["operation"], s.labels["outcome"]): int(s.value)
            for s in samples["sas_step_attempts_total"]
            if s.value
        }
    )
    assert counted == expected
    charge = [
        s for s in samples["sas_step_attempts_total"] if s.labels["operation"] == "agents.payment.charge"
    ]
    assert {(s.labels["workflow"], s.labels["step"]) for s in charge} == {
        ("order_fulfilment", "charge_payment")
    }
    # Every attempt is in the latency histogram; those that came through the broker in the
    # schedule-to-start one (steps run in place after another did not wait in a queue).
    for operation in {op for op, _ in expected}:
        attempts = sum(n for (op, _), n in expected.items() if op == operation)
        assert value(samples, "sas_step_latency_seconds_count", operation=operation) == attempts
        assert value(samples, "sas_step_latency_seconds_bucket", operation=operation, le="+Inf") == attempts
        queued = total(samples, "sas_step_schedule_to_start_seconds_count", operation=operation)
        assert queued <= attempts
        assert value(samples, "sas_step_latency_seconds_sum", operation=operation) > 0

    # Each order's first step is claimed at submit and goes through the broker.
    assert (
        value(samples, "sas_step_schedule_to_start_seconds_count", operation="agents.inventory.reserve") >= 11
    )

    # Live state, alerts, jobs, periodic tasks, queues.
    assert total(samples, "sas_steps") == 0
    assert total(samples, "sas_alerts_open") == (
        Alert.objects.filter(state="firing", acknowledged_at__isnull=True).count()
    )
    assert value(samples, "sas_jobs_due_backlog") == 0
    assert value(samples, "sas_jobs_dispatch_lag_seconds") == 0
    assert (
        time.time() - value(samples, "sas_periodic_task_last_run_timestamp_seconds", task="supervisor.sweep")
        < 30
    )
    assert value(samples, "sas_queue_depth", queue="agent.payment") == 0
    assert value(samples, "sas_broker_up") == 1
    assert value(samples, "sas_breaker_state", service="payment", state="closed") == 1
    assert total(samples, "sas_supervisor_recoveries_total") == 0

    assert {s.labels["section"]: s.value for s in samples["sas_metrics_section_up"]} == dict.fromkeys(
        ("runs", "steps", "jobs", "engine_counters", "alerts_breakers", "queues"), 1.0
    )

    # Labels stay bounded: no run, user or job ids anywhere.
    ids = {str(r) for r in run_ids} | {str(demo_user.id)}
    for name, rows in samples.items():
        for sample in rows:
            assert not ids & set(sample.labels.values()), (name, sample.labels)

    # What the rules and the dashboard query exists.
    def base(name: str) -> str:
        return re.sub(r"_(bucket|count|sum|total)$", "", name.removeprefix("family:"))

    names = {base(n) for n in samples}
    shipped = (DOCKER / "prometheus" / "rules.yml").read_text() + (
        DOCKER / "grafana" / "dashboards" / "sasproject.json"
    ).read_text()
    for used in set(re.findall(r"\bsas_[a-z_]+", shipped)):
        assert base(used) in names, f"{used} is used by the rules or the dashboard but not exported"


def test_metrics__redis_unreachable__served_without_its_parts_and_flagged(
    live_db: None, metrics_settings: None, settings: Any
) -> None:
    # The engine's Redis (counters, folded totals) on a closed port: a real connection refusal.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    settings.SAS = {**settings.SAS, "BREAKER_REDIS_URL": f"redis://127.0.0.1:{closed}/0"}

    samples = scrape(Client())

    up = {s.labels["section"]: s.value for s in samples["sas_metrics_section_up"]}
    assert up["engine_counters"] == 0 and up["runs"] == 0
    assert up["steps"] == 1 and up["jobs"] == 1
    assert "sas_step_attempts_total" not in samples
    assert value(samples, "sas_jobs_due_backlog") == 0


def test_metrics__steps_waiting_and_in_backoff__match_the_database(
    engine: Any, demo_user: Any, metrics_settings: None
) -> None:
    """During an inventory outage (real workers): each order's later steps wait behind its
    first (state `waiting`), and the first waits out backoffs (failed tries, then the open
    breaker's deferrals) - `sas_steps{state}` and `sas_steps_pending_backoff` say so, exactly
    as the database does at the moment of the scrape."""
    from django.db.models.functions import Now

    from scheduler.models import Step

    def in_db() -> Counter[tuple[str, str]]:
        live = Step.objects.filter(process_state__in=("waiting", "pending", "processing"))
        counts = Counter(live.values_list("process_state", "operation"))
        backoff = live.filter(process_state="pending", not_before__gt=Now())
        counts.update(("backoff", op) for op in backoff.values_list("operation", flat=True))
        return counts

    def scraped(samples: dict[str, list[Any]]) -> Counter[tuple[str, str]]:
        counts: Counter[tuple[str, str]] = Counter()
        for s in samples.get("sas_steps", []):
            counts[(s.labels["state"], s.labels["operation"])] += int(s.value)
        for s in samples.get("sas_steps_pending_backoff", []):
            counts[("backoff", s.labels["operation"])] += int(s.value)
        return +counts  # zero series dropped

    client = Client()
    engine.sim.set_faults("inventory", transient_rate=1.0)
    orders = [submit_order(demo_user) for _ in range(3)]

    def agreed(samples_check: Any) -> Any:
        def check() -> tuple[Counter[tuple[str, str]]] | None:
            before = in_db()
            samples = scrape(client)
            after = in_db()
            if before != after or scraped(samples) != before:
                return None  # a step moved meanwhile: look again
            return (before,) if samples_check(before) else None  # truthy even when empty

        return check

    (seen,) = wait_for(
        agreed(lambda c: c[("backoff", "agents.inventory.reserve")] >= 1),
        timeout=30,
        interval=0.1,
        what="a scrape agreeing with the database, a step in backoff",
    )
    # The orders' charge and ship steps wait behind their reserve step.
    assert seen[("waiting", "agents.payment.charge")] >= 1, seen
    assert seen[("waiting", "agents.shipping.create")] >= 1, seen
    assert seen[("pending", "agents.inventory.reserve")] >= seen[("backoff", "agents.inventory.reserve")]

    engine.sim.set_faults("inventory", transient_rate=0.0)
    for order in orders:
        wait_run(order.run_id, tuple(Run.TERMINAL_STATES), timeout=60)
    # Nothing of the orders waits any more (a finished run cancels what still waited).
    (after,) = wait_for(
        agreed(lambda c: not any(state == "waiting" for state, _ in c)),
        timeout=30,
        interval=0.1,
        what="a scrape agreeing with the database, nothing waiting",
    )
    assert not any(op.startswith(("agents.inventory", "agents.payment")) for _, op in after), after

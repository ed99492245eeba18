"""Alerting in real processes: a control worker (the evaluator's beat task and its watchdog
thread), a webhook agent worker (e-mails and alert webhooks), celery beat - on their own Redis
prefix, so the session engine (paused meanwhile) never takes their messages.

- A workflow's failure rate fires one alert: an e-mail lands in the file backend's folder and
  the alert webhook is received with a valid signature - its first attempt answered 503, so the
  agent retries it, with the same event id (body `event_id`, `X-SAS-Event-Id`); when the
  failures leave the window the alert resolves and the resolution is mailed and posted too,
  under another event id.
- Beat killed and the webhook worker killed: the watchdog (not beat) evaluates, the dead man's
  switch fires ("supervisor not running"), its e-mail waits in agent.webhook with no consumer, so
  "a queue with work and no consumer" fires; a new webhook worker resolves that one and delivers
  both mails; beat started again resolves the dead man's switch.

Both run on Redis and on RabbitMQ (`both_brokers`): on RabbitMQ the queue's depth is a passive
queue_declare's message count (liveness/queues.py), and the watchdog keeps evaluating.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from alerting.models import Alert, AlertRule
from sastools.harness import Proc, celery_beat, celery_worker, wait_for
from sastools.rabbit import amqp_url, session_vhost
from scheduler.models import Run
from webhooks.signing import EVENT_ID_HEADER, SIGNATURE_HEADER, signature_verify

from .conftest import run

SECRET = "alert-test-secret"
CONTROL = "scheduler,supervisor,jobs,default"


class Receiver:
    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.fail_first = 0  # answer this many POSTs 503 (a receiver briefly down)
        received = self.posts
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                received.append(({k: v for k, v in self.headers.items()}, body))
                self.send_response(503 if len(received) <= receiver.fail_first else 204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(body) for _, body in self.posts]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.fixture
def alert_broker(broker: str, worker_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The test's broker (both_brokers): on RabbitMQ a vhost of the test's own, as the Redis
    prefix below is on Redis - the session engines' queues never meet these workers'."""
    if broker != "rabbitmq":
        yield {}
        return
    with session_vhost(f"sas-alerts-{os.getpid()}-{uuid.uuid4().hex[:8]}") as vhost:
        yield {"CELERY_BROKER_URL": amqp_url(vhost)}


@pytest.fixture
def alert_env(
    worker_env: dict[str, str], alert_broker: dict[str, str], tmp_path: Path, receiver: Receiver
) -> dict[str, str]:
    return {
        **worker_env,
        **alert_broker,
        "SAS_REDIS_PREFIX": f"{settings.REDIS_PREFIX}alerts:",
        "SAS_ALERTS_ENABLED": "1",
        "SAS_ALERTS_INTERVAL": "1",
        "SAS_ALERT_HEARTBEAT_INTERVAL": "0.5",
        # Workers beat for their queues every half second, gone after 2 s (liveness/heartbeat.py):
        # a killed worker's queue shows as unconsumed soon.
        "SAS_CONSUMER_HEARTBEAT": "0.5",
        "SAS_CONSUMER_STALE": "2",
        # These tests are about the rules, not the start-up grace (test_startup_grace.py).
        "SAS_ALERT_STARTUP_GRACE": "0",
        "EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend",
        "EMAIL_FILE_PATH": str(tmp_path / "mail"),
        "SAS_ALERT_WEBHOOK_SECRET": SECRET,
        "SAS_ALERT_WEBHOOK_PRIVATE_HOSTS": f"127.0.0.1:{receiver.port}",
    }


@pytest.fixture
def procs(alert_env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, Any]]:
    started: list[Proc] = []

    def worker(name: str, queues: str, pool: str = "prefork") -> Proc:
        proc = celery_worker(
            name=name, queues=queues, log_dir=tmp_path, env=alert_env, concurrency=2, pool=pool
        )
        started.append(proc)
        return proc.start(ready_marker=" ready.")

    def beat() -> Proc:
        proc = celery_beat(log_dir=tmp_path, env=alert_env)
        started.append(proc)
        return proc.start(ready_marker="beat: Starting")

    yield {"worker": worker, "beat": beat}
    for proc in started:
        proc.stop()


def mails(tmp_path: Path) -> str:
    folder = tmp_path / "mail"
    return "".join(p.read_text() for p in sorted(folder.glob("*"))) if folder.exists() else ""


@pytest.mark.both_brokers
def test_failure_rate__email_in_folder_and_signed_webhook__then_resolution_announced(
    engine_paused: None, procs: dict[str, Any], receiver: Receiver, tmp_path: Path
) -> None:
    AlertRule.objects.all().delete()
    rule = AlertRule.objects.create(
        name="Payments failing",
        kind="workflow_failure_rate",
        target="wf-live",
        threshold=0.5,
        min_runs=4,
        window=timedelta(minutes=10),
        cooldown=timedelta(0),
        severity="critical",
        recipients="ops@example.com",
        notify_webhook=True,
        webhook_url=f"http://127.0.0.1:{receiver.port}/alerts",
    )
    failed = [run(workflow="wf-live", state="compensated") for _ in range(4)]
    run(workflow="wf-live", state="completed")
    receiver.fail_first = 1
    procs["worker"]("control", CONTROL)
    procs["worker"]("webhook", "agent.webhook", pool="threads")
    procs["beat"]()

    wait_for(lambda: "FIRING: Payments failing" in mails(tmp_path), timeout=60, what="the firing e-mail")
    wait_for(lambda: len(receiver.posts) >= 2, timeout=60, what="the firing webhook and its retry")
    (first_headers, first_body), (headers, body) = receiver.posts[:2]
    assert first_body == body  # the retry sends the same bytes: the same event id
    event_id = json.loads(body)["event_id"]
    assert first_headers[EVENT_ID_HEADER] == headers[EVENT_ID_HEADER] == event_id
    assert signature_verify(secret=SECRET, body=body, header=headers[SIGNATURE_HEADER])
    assert not signature_verify(secret="another", body=body, header=headers[SIGNATURE_HEADER])
    event = json.loads(body)
    assert event["event"] == "alert.firing" and event["alert"]["severity"] == "critical"
    assert set(event["alert"]["runs"]) == {str(r.pk) for r in failed}
    assert "To: ops@example.com" in mails(tmp_path)

    Run.objects.filter(workflow="wf-live").update(created_at=timezone.now() - timedelta(hours=1))
    wait_for(
        lambda: "RESOLVED: Payments failing" in mails(tmp_path), timeout=60, what="the resolution e-mail"
    )
    wait_for(lambda: len(receiver.posts) >= 3, timeout=60, what="the resolution webhook")
    assert [e["event"] for e in receiver.events()] == ["alert.firing", "alert.firing", "alert.resolved"]
    resolved_headers, resolved_body = receiver.posts[2]
    assert json.loads(resolved_body)["event_id"] == resolved_headers[EVENT_ID_HEADER] != event_id
    (alert,) = Alert.objects.filter(rule=rule)  # one incident, one alert
    assert alert.state == "resolved" and alert.count == 4
    assert mails(tmp_path).count("Subject:") == 2


@pytest.mark.both_brokers
def test_beat_and_a_worker_stopped__dead_mans_switch_and_no_consumer_fire_then_resolve(
    engine_paused: None, procs: dict[str, Any], tmp_path: Path, redis_client: Any, alert_env: dict[str, str]
) -> None:
    AlertRule.objects.all().delete()
    common: dict[str, Any] = {"cooldown": timedelta(0), "recipients": "ops@example.com"}
    deadman = AlertRule.objects.create(
        name="Supervisor not running",
        kind="periodic_not_run",
        target="sas: supervisor sweep",
        # 10 sweep intervals (10 s): at 3, a loaded machine's late sweep after beat came back
        # was a second incident, correctly - but not the one this test is about.
        threshold=10,
        **common,
    )
    no_consumer = AlertRule.objects.create(
        name="Webhook queue unconsumed", kind="queue_no_consumer", target="agent.webhook", **common
    )
    prefix = alert_env["SAS_REDIS_PREFIX"]
    # Beat and the consumers first, as in production; then the control worker, whose watchdog
    # gives a task never seen run its full N intervals from its first look.
    beat = procs["beat"]()
    webhook = procs["worker"]("webhook", "agent.webhook", pool="threads")
    procs["worker"]("control", CONTROL)
    # The one last-run record (liveness/last_run.py), under the workers' prefix.
    last_runs = f"{prefix}sas:periodic:last_run"
    wait_for(
        lambda: redis_client.hget(last_runs, "alerting.evaluate"),
        timeout=30,
        what="an evaluation by beat",
    )
    wait_for(lambda: redis_client.hget(last_runs, "supervisor.sweep"), timeout=30, what="a sweep")
    # All is well while beat and the workers run.
    assert not Alert.objects.exists(), list(Alert.objects.values_list("subject", "message"))

    webhook.kill()
    beat.kill()

    def firing(rule: AlertRule) -> bool:
        return Alert.objects.filter(rule=rule, state="firing").exists()

    wait_for(lambda: firing(deadman), timeout=60, what="the dead man's switch (evaluated by the watchdog)")
    wait_for(lambda: firing(no_consumer), timeout=60, what="the unconsumed webhook queue")
    assert mails(tmp_path) == ""  # the e-mails wait in the queue nobody consumes

    procs["worker"]("webhook2", "agent.webhook", pool="threads")
    wait_for(
        lambda: "FIRING: Supervisor not running" in mails(tmp_path), timeout=60, what="the dead man's mail"
    )
    wait_for(
        lambda: Alert.objects.filter(rule=no_consumer, state="resolved").exists(),
        timeout=60,
        what="consumer back",
    )
    procs["beat"]()
    wait_for(
        lambda: "RESOLVED: Supervisor not running" in mails(tmp_path),
        timeout=60,
        what="the dead man's resolution",
    )
    # One alert per incident: the outage's alert is resolved, and any later one (a loaded machine's
    # sweep late again after beat came back is a new incident, correctly) opened after it closed.
    first, *later = Alert.objects.filter(rule=deadman).order_by("pk")
    assert first.state == "resolved" and first.resolved_at is not None
    assert all(alert.created_at >= first.resolved_at for alert in later), [
        (a.created_at, a.message) for a in later
    ]
    assert Alert.objects.filter(rule=no_consumer).count() == 1
    assert "Webhook queue unconsumed" in mails(tmp_path)

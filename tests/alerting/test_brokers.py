"""The alert rule "a queue with work and no consumer" reads depth through the one reader,
liveness/queues.py, on either broker (issue 27): on RabbitMQ a passive queue_declare's
message count; a broker that cannot be read skips that rule, logged, and the tick goes on with
the others. The evaluator in-process on real PostgreSQL, Redis and the machine's RabbitMQ
(tests/alerting/test_live.py runs the live rules in real workers on both brokers)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue

from alerting.models import Alert
from alerting.services import alert_rules_evaluate
from sastools.rabbit import amqp_url

from .conftest import rule, run

pytestmark = pytest.mark.usefixtures("no_rules")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_queue_no_consumer__rabbitmq_broker__depth_from_a_passive_declare(
    settings: Any, rabbit_vhost: str
) -> None:
    url = amqp_url(rabbit_vhost)
    name = "alerttest.rabbit"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name, auto_delete=False)
    with Connection(url, connect_timeout=2) as conn:
        producer = conn.Producer()
        for i in range(2):
            producer.publish({"n": i}, exchange=queue.exchange, routing_key=name, declare=[queue])
        settings.CELERY_BROKER_URL = url
        try:
            r = rule("queue_no_consumer", target=name)
            never_declared = rule("queue_no_consumer", target="alerttest.never-declared")
            assert alert_rules_evaluate().ran
        finally:
            queue(conn.default_channel).delete()
    (alert,) = Alert.objects.filter(rule=r)
    assert (alert.state, alert.subject) == ("firing", name)
    assert "2 messages and no live consumer" in alert.message
    assert not Alert.objects.filter(rule=never_declared).exists()


@pytest.mark.parametrize("scheme", ["amqp", "redis", "sqs"])
def test_queue_no_consumer__broker_unreadable__that_rule_skipped_the_others_evaluated(
    settings: Any, scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings.CELERY_BROKER_URL = f"{scheme}://127.0.0.1:{_closed_port()}//"
    unread = rule("queue_no_consumer", target="alerttest.q")
    other = rule("run_needs_operator")
    run(state="failed")
    assert alert_rules_evaluate().ran
    assert Alert.objects.get(rule=other).state == "firing"
    assert not Alert.objects.filter(rule=unread).exists()
    assert f"alert rule {unread.pk} (queue_no_consumer) could not be evaluated" in caplog.text

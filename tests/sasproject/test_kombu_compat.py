"""The guard around kombu's channel close when the broker connection is lost (see
sasproject/kombu_compat.py): a real Redis, a real kombu channel with an unacknowledged
message, its transport detached as kombu leaves it after a lost connection."""

from __future__ import annotations

import uuid
from typing import Any, cast

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as kombu_redis

from sasproject import kombu_client_reuse, kombu_compat


@pytest.fixture
def channel_with_unacked_message():
    queue_name = f"{settings.REDIS_PREFIX}compat-{uuid.uuid4().hex}"
    conn = Connection(settings.CELERY_BROKER_URL)
    channel = conn.default_channel
    queue = Queue(queue_name, Exchange(queue_name), routing_key=queue_name, channel=channel)
    queue.declare()
    with conn.Producer() as producer:
        producer.publish({"x": 1}, exchange=queue.exchange, routing_key=queue_name, declare=[queue])
    message = queue.get(no_ack=False)
    assert message is not None and not message.acknowledged
    yield conn, channel, message
    conn.transport.client = conn  # reattach, so the cleanup can restore and delete
    message.ack()
    queue.delete()
    conn.release()


def test_channel_close__transport_detached__kombu_raises_attribute_error(
    channel_with_unacked_message, monkeypatch
):
    # kombu's own client factory: sasproject.kombu_client_reuse (installed by the Celery app
    # once any test has loaded it) turns this case into a ConnectionError that the close path
    # swallows, which is the point of that patch but not what this test documents.
    monkeypatch.setattr(kombu_redis.Channel, "_create_client", kombu_client_reuse._original)
    conn, channel, _ = channel_with_unacked_message
    conn.transport.client = None  # what Connection._do_close_transport leaves behind
    with pytest.raises(AttributeError, match="hostname"):
        kombu_compat._original(conn, channel)


def test_channel_close__transport_detached__guard_ignores_it(channel_with_unacked_message):
    conn, channel, _ = channel_with_unacked_message
    kombu_compat.channel_close_patch_install()
    conn.transport.client = None
    conn.maybe_close_channel(channel)  # would raise AttributeError without the guard
    assert channel.closed


def test_guard__other_attribute_errors_propagate():
    class Broken:
        connection = None

        def close(self):
            raise AttributeError("something else")

    kombu_compat.channel_close_patch_install()
    with pytest.raises(AttributeError, match="something else"):
        Connection("memory://").maybe_close_channel(cast(Any, Broken()))

"""One Redis client per kombu channel for synchronous commands (sasproject/kombu_client_reuse.py),
on a real Redis: publishes and acks still work, the client is built once per pool, and a
channel whose pool was dropped (close, connection error) gets a client for its new pool."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Queue

from sasproject import kombu_client_reuse


@pytest.fixture
def queue_on_redis():
    # The Celery app installs it; a test may run before the app loads.
    kombu_client_reuse.redis_client_reuse_install()
    name = f"{settings.REDIS_PREFIX}reuse-{uuid.uuid4().hex}"
    conn = Connection(settings.CELERY_BROKER_URL)
    channel = conn.default_channel
    queue = Queue(name, Exchange(name), routing_key=name, channel=channel)
    queue.declare()
    yield conn, channel, queue
    queue.delete()
    conn.release()


def _publish(conn, queue, body):
    with conn.Producer() as producer:
        producer.publish(body, exchange=queue.exchange, routing_key=queue.routing_key, declare=[queue])


def test_publish_and_ack__one_client_per_pool(queue_on_redis):
    conn, channel, queue = queue_on_redis
    with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
        assert first is second
        assert first.connection_pool is channel.pool

    for n in range(3):
        _publish(conn, queue, {"n": n})
    got = []
    for _ in range(3):
        message = queue.get(no_ack=False)
        assert message is not None
        got.append(message.payload["n"])
        message.ack()
    assert got == [0, 1, 2]
    assert queue.get(no_ack=False) is None  # every ack went through: nothing left, nothing unacked
    with channel.conn_or_acquire() as client:
        assert client.hlen(channel.unacked_key) == 0


def test_new_pool__new_client(queue_on_redis):
    conn, channel, queue = queue_on_redis
    with channel.conn_or_acquire() as before:
        pass
    channel._disconnect_pools()  # what kombu does when the channel closes or its connection fails
    with channel.conn_or_acquire() as after:
        assert after is not before
        assert after.connection_pool is channel.pool
    _publish(conn, queue, {"n": 1})
    message = queue.get(no_ack=True)
    assert message is not None and message.payload == {"n": 1}


def test_async_client_untouched(queue_on_redis):
    _, channel, _ = queue_on_redis
    assert channel.client.connection_pool is channel.async_pool


def test_ack_on_a_channel_whose_connection_is_gone__a_connection_error_that_celery_logs(queue_on_redis):
    """A threads-pool agent whose task ends after the broker went away and the worker
    reconnected acks on the old channel: its pool dropped, its transport's client gone. kombu
    then failed with AttributeError ('NoneType' object has no attribute 'hostname'), which Celery
    does not expect from an ack and which ended the worker ("Unrecoverable error"; found by the
    chaos soak's Redis restart, issue 22). It is a connection error now, which Celery logs
    ("Couldn't ack") and goes on."""
    conn, _, queue = queue_on_redis
    _publish(conn, queue, {"n": 1})
    consumer_conn = Connection(settings.CELERY_BROKER_URL)
    channel: Any = consumer_conn.default_channel  # a kombu.transport.redis.Channel
    message = queue(channel).get(no_ack=False)
    assert message is not None
    # The old channel's state in the soak's traceback: pools dropped on the connection error,
    # the transport's client cleared when the worker let the connection go.
    channel._disconnect_pools()
    transport, channel.connection.client = channel.connection, None

    with pytest.raises(ConnectionError):
        message.ack()
    message.ack_log_error(logging.getLogger(__name__), consumer_conn.connection_errors)  # logged only
    # Back on its feet, the ack goes through (nothing left unacked for the next test to find).
    transport.client = consumer_conn
    message.ack()
    consumer_conn.release()

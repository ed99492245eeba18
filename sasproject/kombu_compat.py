"""One guard around kombu 5.7.0, for a worker that loses its Redis broker.

When the broker connection drops, Celery's consumer closes the connection with
`kombu.common.ignore_errors`, which swallows only connection and channel errors. Closing the
Redis channel restores its unacknowledged messages first, and that needs a client built from
the transport's connection info. When the transport was already detached from its connection
(`Connection._do_close_transport` sets `transport.client = None`, and the default channel is
closed again on the next close), building that client raises
`AttributeError: 'NoneType' object has no attribute 'hostname'` - and the worker exits with
"Unrecoverable error" instead of reconnecting. Seen in `tests/e2e/test_outage_live.py` (Redis
killed with messages unacknowledged), about one run in five.

The guard treats that one case like the connection error it is: the channel is gone, and its
unacknowledged messages stay in Redis's unacked index, from which kombu restores them once
their visibility timeout passes (and the engine does not depend on them: an unanswered step is
recovered by the supervisor at its deadline). Any other AttributeError still propagates.
"""

from __future__ import annotations

from typing import Any

from kombu import Connection

_original = Connection.maybe_close_channel


def _detached(channel: Any) -> bool:
    transport = getattr(channel, "connection", None)
    return transport is not None and getattr(transport, "client", object()) is None


def maybe_close_channel(self: Connection, channel: Any) -> None:
    try:
        _original(self, channel)
    except AttributeError:
        if not _detached(channel):
            raise


def channel_close_patch_install() -> None:
    """Idempotent: patch `kombu.Connection.maybe_close_channel` once."""
    if Connection.maybe_close_channel is not maybe_close_channel:
        Connection.maybe_close_channel = maybe_close_channel  # type: ignore[method-assign]

"""Signals other apps hook into (webhook delivery, metrics).

`run_event` is sent inside the transaction that records a RunEvent, with `event` (the RunEvent
instance). A receiver that writes rows joins that transaction (so it commits or rolls back with
the state change); one that talks to the outside world must defer with `transaction.on_commit`.
"""

from __future__ import annotations

from django.dispatch import Signal

run_event = Signal()

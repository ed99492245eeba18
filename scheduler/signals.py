"""Signals other apps hook into (webhook delivery, metrics).

`run_event` (and `run_events`, below) is sent inside the transaction that records a RunEvent,
with `event` (the RunEvent instance). A receiver that writes rows joins that transaction (so
it commits or rolls back with the state change); one that talks to the outside world must
defer with `transaction.on_commit`.
"""

from __future__ import annotations

from django.dispatch import Signal

run_event = Signal()

# Many events recorded at once (`scheduler.services.events_record`, a supervisor batch), with
# `events` (a list of RunEvent instances, in order). A receiver that listens to `run_event` must
# also handle this one, or it misses those events; it can then do one query for the whole batch.
run_events = Signal()

"""Signals other apps hook into (webhook delivery, metrics).

`run_event` is sent, for observed runs only (`Run.observed`, set by
whoever subscribes), inside the transaction that records a RunEvent, with `event` (the RunEvent
instance). Runs nobody observes cost no receiver call on the hot path. A receiver that writes
rows joins that transaction (so it commits or rolls back with the state change); one that talks
to the outside world must defer with `transaction.on_commit`.
"""

from __future__ import annotations

from django.dispatch import Signal

run_event = Signal()


# A step went to Error (out of attempts, or refused for good), sent inside the transaction of
# that change, with `run_id`, `step_id`, `step_name`, `kind` ("forward" / "compensation"),
# `reason` and `permanent`. The supervisor raises operator alerts from it; the scheduler does
# not know who listens.
step_errored = Signal()

# A compensation step reached its alert threshold (`max_failures`) and keeps retrying, sent once
# per step inside the transaction of that failure, with `run_id`, `step_id`, `step_name`,
# `failure_count` and `error`. The supervisor raises an operator alert from it.
step_struggling = Signal()

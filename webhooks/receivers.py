"""Signal receivers: thin, they call the services."""

from __future__ import annotations

from typing import Any

from scheduler.models import RunEvent

from .services import webhook_event_recorded


def on_run_event(sender: Any, event: RunEvent, **kwargs: Any) -> None:
    # Runs inside the transaction that records the event (scheduler/signals.py), so the outbox
    # row commits, or rolls back, with the state change it reports.
    webhook_event_recorded(event=event)

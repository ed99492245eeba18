"""Run events: recorded with the state change they report, announced to signal receivers.

Events of every run are stored (the status page reads them). The `run_event` signal is sent
only for observed runs (`Run.observed`: a webhook subscriber), inside the transaction of the
change, so a receiver's rows commit with it; runs nobody watches cost no extra query.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sasproject.logs import state_change
from scheduler.models import Run, RunEvent
from scheduler.signals import run_event


def event_record(
    *, run_id: uuid.UUID | str, type: str, observed: bool, step_id: int | None = None, **data: Any
) -> RunEvent:
    """Store one event of `run_id`; announce it when the run is observed. Transaction: the
    caller's (the event commits with the change it reports)."""
    event = RunEvent.objects.create(run_id=run_id, type=type, step_id=step_id, data=data)
    state_change(
        f"run_{type}",
        "run %s: %s%s",
        run_id,
        type,
        f" (step {step_id})" if step_id else "",
        run=run_id,
        step=step_id,
    )
    if observed:
        run_event.send(sender=RunEvent, event=event)
    return event


def events_announce(rows: list[dict[str, Any]]) -> None:
    """Send `run_event` for events the transitions wrote and returned (already only those of
    observed runs), in order. Builds the instances from the returned rows: no query."""
    for row in rows:
        created = row["created_at"]
        event = RunEvent(
            id=row["id"],
            event_id=uuid.UUID(str(row["event_id"])),
            run_id=uuid.UUID(str(row["run_id"])),
            step_id=row.get("step_id"),
            type=row["type"],
            data=row.get("data") or {},
            created_at=datetime.fromisoformat(created) if isinstance(created, str) else created,
        )
        run_event.send(sender=RunEvent, event=event)


def run_observe(*, run_id: uuid.UUID | str) -> None:
    """Mark a run observed: from now on its events are announced (webhooks call this when a
    subscriber registers). Transaction: the caller's."""
    Run.objects.filter(pk=run_id).update(observed=True)

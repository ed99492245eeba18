"""The export workflow's logic on the harness (sastools.testkit, issue 31): its heartbeat step
writes the owner's history as CSV through the real state machine and database, the agent's body
in-process, no broker and no worker. The live tests keep what needs processes: heartbeats
carrying a step past its first window, a frozen worker (tests/e2e/test_long_steps_live.py)."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.utils import timezone

from exports.models import Export
from exports.services import export_request
from sastools.testkit import Harness
from scheduler.models import Run, TaskExecutionHistory


def test_export__the_owners_history_only__as_csv__run_completed(
    harness: Harness, django_user_model: Any, settings: Any
) -> None:
    settings.SAS = {**settings.SAS, "EXPORT_MIN_SECONDS": 0}  # the demo's pacing: real time, not the clock's
    owner = django_user_model.objects.create(username="export-flow")
    other = django_user_model.objects.create(username="export-flow-other")
    for user, workers in ((owner, ["mine-1", "mine-2"]), (other, ["theirs"])):
        run = Run.objects.create(workflow="order_fulfilment", input={}, owner=user, state="completed")
        for worker in workers:
            TaskExecutionHistory.objects.create(
                run=run, status="succeeded", started_at=timezone.now(), worker=worker
            )

    export = export_request(owner_id=owner.pk)
    harness.settle()

    export.refresh_from_db()
    assert export.run is not None and harness.run(export.run).state == Run.State.COMPLETED
    rows = list(csv.DictReader(io.StringIO(Export.objects.get(pk=export.pk).file.content)))
    assert export.completed_at is not None and export.rows == len(rows)
    # The owner's two rows and the export's own attempt (started, it is the owner's too); none
    # of the other customer's.
    workers = [r["worker"] for r in rows]
    assert {"mine-1", "mine-2"} <= set(workers) and "theirs" not in workers
    assert len(rows) == 3 and {r["workflow"] for r in rows} == {"order_fulfilment", "exports.history_csv"}

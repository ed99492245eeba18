"""The export agent: writes a user's execution history as CSV, heartbeating as it goes
(agents.long.HeartbeatAgentTask). Its queue follows its name: `agent.exports`."""

from __future__ import annotations

import csv
import io
import time
from typing import Any

from celery import shared_task
from django.conf import settings

from agents.faults import PermanentFault
from agents.long import Beat, HeartbeatAgentTask
from scheduler.models import HistoryStatus, TaskExecutionHistory
from scheduler.outputs import output_export_text
from scheduler.selectors import history_of_owner

from .models import Export
from .selectors import export_of_step_owner
from .services import export_complete

COLUMNS = [
    "run_id",
    "workflow",
    "step",
    "kind",
    "status",
    "retry_count",
    "worker",
    "error",
    "started_at",
    "ended_at",
    # What the step returned, on the attempt that succeeded (issue 28): a task's value as JSON,
    # an HTTP answer as its status, kept headers and body (scheduler/outputs.py).
    "output",
]


def _output(row: TaskExecutionHistory) -> str:
    """The step's output on its succeeded attempt's row; empty on every other row."""
    if row.status != HistoryStatus.SUCCEEDED or row.step is None or row.run is None:
        return ""
    return output_export_text(workflow=row.run.workflow, step_name=row.step.name, result=row.step.result)


class HistoryExportAgent(HeartbeatAgentTask):
    def work(self, *, payload: dict[str, Any], beat: Beat) -> Any:
        """Read the owner's history (streamed) into a CSV in memory, beating between rows. The
        demo paces it to take at least settings.SAS["EXPORT_MIN_SECONDS"], like a long job.
        An export that is not the run owner's is refused for good (defence in depth: the
        workflow is staff-only work, so no customer's job names one)."""
        try:
            export = export_of_step_owner(export_id=payload["export_id"], step_id=beat.step_id)
        except Export.DoesNotExist:
            raise PermanentFault(f"export {payload['export_id']} is not the run owner's") from None
        min_seconds = float(settings.SAS["EXPORT_MIN_SECONDS"])
        began = time.monotonic()
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(COLUMNS)
        rows = 0
        for h in history_of_owner(owner_id=export.owner_id):
            writer.writerow(
                [
                    h.run_id,
                    h.run.workflow if h.run is not None else "",
                    h.step.name if h.step is not None else "",
                    h.kind,
                    h.status,
                    h.retry_count,
                    h.worker,
                    h.error,
                    h.started_at.isoformat(),
                    h.ended_at.isoformat() if h.ended_at else "",
                    _output(h),
                ]
            )
            rows += 1
            beat()
        while time.monotonic() - began < min_seconds:
            time.sleep(min(0.1, max(0.0, min_seconds - (time.monotonic() - began))))
            beat()
        return {"content": out.getvalue(), "rows": rows}

    def commit(self, *, payload: dict[str, Any], built: Any, lease: str) -> Any:
        size = export_complete(
            export_id=payload["export_id"], content=built["content"], rows=built["rows"], lease=lease
        )
        return {"rows": built["rows"], "bytes": size}


def _history_csv(self: HistoryExportAgent, **kwargs: Any) -> str:
    return self.perform_long(**kwargs)


history_csv = shared_task(name="agents.exports.history_csv", bind=True, base=HistoryExportAgent)(_history_csv)

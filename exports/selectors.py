"""Export reads, every one scoped by the user: another user's export is not found (404)."""

from __future__ import annotations

import uuid
from typing import Any

from django.db.models import QuerySet

from scheduler.models import HeartbeatStatus, Run, Step

from .models import Export, ExportFile

STATUS_LABELS = {
    "waiting": "Waiting",
    "in_progress": "In progress",
    "completed": "Completed",
    "failed": "Failed",
}


def export_list(*, user: Any) -> QuerySet[Export]:
    """The user's exports, newest first (export_owner_created_idx), with their runs."""
    return Export.objects.filter(owner_id=user.pk).select_related("run").order_by("-created_at")


def export_get(*, user: Any, export_id: uuid.UUID | str) -> Export:
    """Export.DoesNotExist unless `user` owns it."""
    return export_list(user=user).get(pk=export_id)


def export_of_step_owner(*, export_id: uuid.UUID | str, step_id: int) -> Export:
    """The export an agent's step is to write, scoped by the owner of the step's run: another
    user's export (or none) is Export.DoesNotExist, so a run never writes someone else's
    history into someone else's export. Two indexed lookups."""
    owner_id = Step.objects.filter(pk=step_id).values_list("run__owner_id", flat=True).first()
    if owner_id is None:
        raise Export.DoesNotExist(f"step {step_id} has no owner")
    return Export.objects.get(pk=export_id, owner_id=owner_id)


def export_file(*, user: Any, export_id: uuid.UUID | str) -> tuple[Export, ExportFile]:
    """The export's file, for its owner only. Export.DoesNotExist / ExportFile.DoesNotExist."""
    export = export_get(user=user, export_id=export_id)
    return export, ExportFile.objects.get(export_id=export.pk)


def export_status(export: Export) -> dict[str, Any]:
    """What the list shows: completed / failed / in progress (with the last heartbeat)."""
    run = export.run
    heartbeat = (
        HeartbeatStatus.objects.filter(run_id=run.pk)
        .values("status", "heartbeats", "last_heartbeat_at")
        .first()
        if run is not None
        else None
    )
    if export.completed_at is not None:
        status = "completed"
    elif run is not None and run.state in Run.TERMINAL_STATES:
        status = "failed"
    elif heartbeat and heartbeat["status"] == HeartbeatStatus.Status.IN_PROGRESS:
        status = "in_progress"
    else:
        status = "waiting"
    return {
        "id": str(export.pk),
        "status": status,
        "status_label": STATUS_LABELS[status],
        "created_at": export.created_at.isoformat(),
        "completed_at": export.completed_at.isoformat() if export.completed_at else None,
        "rows": export.rows,
        "size_bytes": export.size_bytes,
        "run_id": str(run.pk) if run else None,
        "run_state": run.state if run else None,
        "heartbeats": heartbeat["heartbeats"] if heartbeat else 0,
        "last_heartbeat_at": (
            heartbeat["last_heartbeat_at"].isoformat()
            if heartbeat and heartbeat["last_heartbeat_at"]
            else None
        ),
        "filename": export.filename,
    }

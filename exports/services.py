"""Export writes: request one (an export row and its run, together); commit its file."""

from __future__ import annotations

import uuid

from django.db import transaction
from django.db.models.functions import Now

from scheduler.limits import quota_check_runs, quota_check_workflow_runs
from scheduler.services import run_submit

from .models import Export, ExportFile
from .workflows import EXPORT_WORKFLOW


class ExportAlreadyWritten(Exception):
    """Another attempt committed this export's file (cannot happen under the step's lease;
    kept as a guard: the file is written once)."""


def export_request(*, owner_id: int) -> Export:
    """A new export of `owner_id`'s execution history, and the run that writes it, in one
    transaction. Refused with QuotaExceeded (nothing written) when the owner has
    SAS_QUOTAS["EXPORTS_IN_FLIGHT"] exports or SAS_QUOTAS["RUNS_IN_FLIGHT"] runs going, counted
    under the owner's quota lock. Transaction: its own (nests in the caller's)."""
    with transaction.atomic():
        quota_check_workflow_runs(owner_id=owner_id, workflow=EXPORT_WORKFLOW, name="EXPORTS_IN_FLIGHT")
        quota_check_runs(owner_id=owner_id)
        export = Export.objects.create(owner_id=owner_id)
        run = run_submit(
            workflow=EXPORT_WORKFLOW,
            input={"export_id": str(export.pk)},
            owner_id=owner_id,
            correlation_id=f"export:{export.pk}",
        )
        Export.objects.filter(pk=export.pk).update(run=run)
        export.run = run
    return export


def export_complete(*, export_id: uuid.UUID | str, content: str, rows: int, lease: str) -> int:
    """Store the file and mark the export complete: one conditional UPDATE (not completed yet)
    and the file's INSERT. Transaction: the caller's - the agent's fenced one, which also
    accepts the step's success. Returns the file's size in bytes."""
    size = len(content.encode())
    updated = Export.objects.filter(pk=export_id, completed_at__isnull=True).update(
        completed_at=Now(), rows=rows, size_bytes=size, lease=lease
    )
    if updated != 1:
        raise ExportAlreadyWritten(f"export {export_id} is already complete")
    ExportFile.objects.create(export_id=export_id, content=content)
    return size

"""A user's export of their execution history as CSV: the domain of the heartbeat demo.

The file is stored in the database (`ExportFile`), written in the same transaction as the
export's completion and the step's success, under the step's lease: an export is either
complete with its one file, or has none. (MEDIA_ROOT would need a filesystem shared by every
worker and web process; a history export is small enough for a row.)
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from scheduler.models import Run


class Export(models.Model):
    """A user's history export. In the database its primary key is (id, owner_id), with a
    UNIQUE (id) for the file's foreign key (decision record 55, exports/migrations/0002)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="exports")
    run = models.OneToOneField(Run, null=True, blank=True, on_delete=models.SET_NULL, related_name="export")
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    rows = models.PositiveIntegerField(null=True, blank=True, help_text="History rows in the file.")
    size_bytes = models.PositiveIntegerField(null=True, blank=True)
    # The attempt (step lease) whose work was committed: exactly one writes the file.
    lease = models.UUIDField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"], name="export_owner_created_idx")]

    def __str__(self) -> str:
        return f"export {self.id} of user {self.owner_id}"

    @property
    def filename(self) -> str:
        return f"history-{self.created_at:%Y%m%d-%H%M%S}-{str(self.id)[-8:]}.csv"


class ExportFile(models.Model):
    export = models.OneToOneField(Export, primary_key=True, on_delete=models.CASCADE, related_name="file")
    content = models.TextField()

    def __str__(self) -> str:
        return f"file of export {self.export_id}"

"""The admin of long work (issue 9): paginated steps' checkpoints and heartbeat steps' statuses."""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from adminkit.display import state_badge
from adminkit.readonly import ReadOnlyAdmin
from scheduler.models import Checkpoint, HeartbeatStatus

from .links import RunColumn


@admin.register(Checkpoint)
class CheckpointAdmin(RunColumn, ReadOnlyAdmin):
    """Seed 004's Checkpoint: where each paginated step is (one row per step)."""

    list_display = (
        "step",
        "run_short",
        "page_size",
        "page_start",
        "pages_done",
        "rows_done",
        "total",
        "completed",
        "updated_at",
    )
    list_filter = ("completed",)
    ordering = ("-updated_at",)


@admin.register(HeartbeatStatus)
class HeartbeatStatusAdmin(RunColumn, ReadOnlyAdmin):
    """Seed 004's JobStatus (HeartbeatStatus here): in progress / completed and the last heartbeat
    of each heartbeat step."""

    list_display = (
        "step",
        "run_short",
        "status_badge",
        "heartbeats",
        "last_heartbeat_at",
        "worker",
        "updated_at",
    )
    list_filter = ("status",)
    ordering = ("-updated_at",)

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj: HeartbeatStatus) -> SafeString:
        return state_badge(obj.status, obj.get_status_display())

"""The tables the platform keeps by time (issue 29): each partitioned table and the setting that
holds its retention in days. The engine's history and events are declared where their models
live (scheduler/partitions.py); the operator's audit here, beside its model."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

from scheduler.partitions import EVENTS, HISTORY, PartitionedTable

AUDIT = PartitionedTable("ops_operatoraction", "created_at", "month")


@dataclass(frozen=True)
class KeptTable:
    spec: PartitionedTable
    # The SAS setting holding its retention in days (docs/deploying/deploy.md, "Retention").
    setting: str

    @property
    def keep(self) -> timedelta:
        return timedelta(days=int(settings.SAS[self.setting]))


KEPT_TABLES = (
    KeptTable(HISTORY, "RETENTION_HISTORY_DAYS"),
    KeptTable(EVENTS, "RETENTION_EVENTS_DAYS"),
    KeptTable(AUDIT, "RETENTION_AUDIT_DAYS"),
)

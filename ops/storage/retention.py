"""The platform's storage maintenance (issue 29): partitions made ahead of time, whole
partitions past retention archived then detached and dropped, and old runs purged.

Run by the "sas: storage maintenance" beat row (ops/tasks.py, queue storage) and by
`manage.py storage_partitions`. Idempotent: two at once meet on each parent's lock (the second
finds the partition made, or gone); a failure leaves what it had not reached for the next tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from scheduler.partitions import partition_detach_drop, partitions_ensure_ahead, partitions_expired

from .archive import partition_archive_write
from .purge import runs_purge
from .tables import KEPT_TABLES, KeptTable

logger = logging.getLogger("sas.storage")


@dataclass
class Maintenance:
    made: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    archived: dict[str, int] = field(default_factory=dict)
    runs_purged: int = 0


def archive_folder() -> Path | None:
    folder = settings.SAS["ARCHIVE_DIR"]
    return Path(folder) if folder else None


def partitions_make_ahead(*, today: datetime | None = None) -> list[str]:
    """Every kept table has its partitions from today to PARTITIONS_AHEAD_DAYS ahead (and one for
    each period of rows waiting in its default partition). Returns those made."""
    day = (today or timezone.now()).astimezone(UTC).date()
    ahead = int(settings.SAS["PARTITIONS_AHEAD_DAYS"])
    made: list[str] = []
    for kept in KEPT_TABLES:
        made += partitions_ensure_ahead(kept.spec, today=day, days_ahead=ahead)
    return made


def partitions_drop_expired(
    *, now: datetime | None = None, tables: tuple[KeptTable, ...] = KEPT_TABLES, folder: Path | None = None
) -> Maintenance:
    """Archive (when SAS_ARCHIVE_DIR is set), detach and drop each partition past its table's
    retention. An archive that fails to write keeps its partition (logged; tried next tick)."""
    done = Maintenance()
    folder = folder if folder is not None else archive_folder()
    for kept in tables:
        for partition in partitions_expired(kept.spec, now=now or timezone.now(), keep=kept.keep):
            if folder is not None:
                try:
                    path, rows = partition_archive_write(
                        spec=kept.spec, partition=partition.name, folder=folder
                    )
                except OSError:
                    logger.exception("archive of %s failed; the partition is kept", partition.name)
                    continue
                done.archived[str(path)] = rows
            partition_detach_drop(kept.spec, partition.name)
            done.dropped.append(partition.name)
            logger.info("dropped %s (past %s)", partition.name, kept.setting)
    return done


def storage_maintain(*, now: datetime | None = None) -> Maintenance:
    """One maintenance tick: make ahead, drop the expired, purge one bounded round of runs."""
    done = partitions_drop_expired(now=now)
    done.made = partitions_make_ahead(today=now)
    done.runs_purged = runs_purge(now=now)
    return done

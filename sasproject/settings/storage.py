"""The storage block of the SAS dict (issue 29): history partitions made ahead, retention per
kind of history, the archive folder, and the purge of old runs. docs/deploying/deploy.md, "Retention"."""

from __future__ import annotations

import os

from sasproject.settings.base import BASE_DIR
from sasproject.settings.engine import SAS
from sasproject.settings.env import env_float

# Partitions (one per UTC day; the operator's audit one per month) are made this many days
# ahead by the "sas: storage maintenance" beat row and `manage.py storage_partitions`.
SAS["PARTITIONS_AHEAD_DAYS"] = int(os.environ.get("SAS_PARTITIONS_AHEAD_DAYS", "7"))
# The maintenance's beat period (seconds): hourly; each tick makes what is missing, archives and
# drops what is past retention, and purges one bounded round of old runs.
SAS["STORAGE_INTERVAL"] = env_float("SAS_STORAGE_INTERVAL", 3600.0)
# Retention in days per kind of history: a whole partition is archived, then detached and
# dropped, once its newest possible row is older than this. Attempt history and job occurrence
# history share one table (scheduler_taskexecutionhistory), hence one setting.
SAS["RETENTION_HISTORY_DAYS"] = int(os.environ.get("SAS_RETENTION_HISTORY_DAYS", "30"))
SAS["RETENTION_EVENTS_DAYS"] = int(os.environ.get("SAS_RETENTION_EVENTS_DAYS", "30"))
SAS["RETENTION_AUDIT_DAYS"] = int(os.environ.get("SAS_RETENTION_AUDIT_DAYS", "400"))
# Terminal runs (with their steps and what is left of their history) are purged this many days
# after they finished, in batches of RETENTION_PURGE_BATCH runs, at most RETENTION_PURGE_BATCHES
# a tick. 0 keeps runs for ever.
SAS["RETENTION_RUNS_DAYS"] = int(os.environ.get("SAS_RETENTION_RUNS_DAYS", "30"))
SAS["RETENTION_PURGE_BATCH"] = int(os.environ.get("SAS_RETENTION_PURGE_BATCH", "500"))
SAS["RETENTION_PURGE_BATCHES"] = int(os.environ.get("SAS_RETENTION_PURGE_BATCHES", "20"))
# Where a partition is written before it is dropped: <folder>/<table>/<partition>.jsonl.gz.
# Empty: partitions are dropped without an archive (say so on purpose).
SAS["ARCHIVE_DIR"] = os.environ.get("SAS_ARCHIVE_DIR", str(BASE_DIR / ".devdata" / "archive"))

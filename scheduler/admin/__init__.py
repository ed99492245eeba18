"""The operator's admin for the scheduler's models, by concern: `runs` (runs, steps, the history),
`longwork` (checkpoints, heartbeat statuses). The Job admin is the jobs app's (`jobs/admin.py`);
the run admin operators get is registered once, by `ops/admin.py` (over `runs.RunAdmin`).
Other apps' admins import the shared pieces from here."""

from . import longwork
from .runs import OPERATE_PERMISSION, AttentionFilter, RunAdmin, WorkflowFilter, run_link

__all__ = [
    "OPERATE_PERMISSION",
    "AttentionFilter",
    "RunAdmin",
    "WorkflowFilter",
    "longwork",
    "run_link",
]

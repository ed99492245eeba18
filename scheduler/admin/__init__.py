"""The operator's admin for the scheduler's models, by concern: `runs` (the run list and a run's
page), `steps`, `history` (the execution history), `longwork` (checkpoints, heartbeat statuses)
and `links` (a link to a run and the "may operate" permission, which other apps' admins use).
The Job admin is the jobs app's (`jobs/admin.py`); the run admin operators get is registered
once, by `ops/admin.py` (over `runs.RunAdmin`). Other apps' admins import the shared pieces from
here."""

from . import history, longwork, steps
from .links import OPERATE_PERMISSION, RunColumn, run_link
from .runs import AttentionFilter, RunAdmin, WorkflowFilter

__all__ = [
    "OPERATE_PERMISSION",
    "AttentionFilter",
    "RunAdmin",
    "RunColumn",
    "WorkflowFilter",
    "history",
    "longwork",
    "run_link",
    "steps",
]

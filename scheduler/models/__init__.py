"""The scheduler's models, by concern (app label `scheduler`; the migrations are unchanged - the
classes moved, the tables did not): `runs` (runs, steps), `history` (attempts, run events),
`jobs` (jobs, their scheduled occurrences, the dispatcher's shard leases), `longwork`
(checkpoints, heartbeat statuses), `base` (shared helpers). Import them from here."""

from .base import NON_NEGATIVE, row_check
from .dependencies import DependencyCondition, DependencyGate, DependencyOutcome, JobDependency
from .history import HistoryStatus, RunEvent, TaskExecutionHistory
from .holds import HELD, Pause
from .jobs import DispatcherShard, Job, OverlapPolicy, ScheduledJob, ScheduledJobKind
from .longwork import Checkpoint, HeartbeatState, HeartbeatStatus
from .runs import (
    RUN_TERMINAL_STATES,
    RUN_UNFINISHED_STATES,
    Run,
    RunState,
    Step,
    StepKind,
    StepState,
)

__all__ = [
    "HELD",
    "NON_NEGATIVE",
    "RUN_TERMINAL_STATES",
    "RUN_UNFINISHED_STATES",
    "Checkpoint",
    "DependencyCondition",
    "DependencyGate",
    "DependencyOutcome",
    "DispatcherShard",
    "HeartbeatState",
    "HeartbeatStatus",
    "HistoryStatus",
    "Job",
    "JobDependency",
    "OverlapPolicy",
    "Pause",
    "Run",
    "RunEvent",
    "RunState",
    "ScheduledJob",
    "ScheduledJobKind",
    "Step",
    "StepKind",
    "StepState",
    "TaskExecutionHistory",
    "row_check",
]

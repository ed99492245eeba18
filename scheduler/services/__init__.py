"""The scheduler's services, split by flow, behind this one import face.

- `submit`: a run and its steps written in one transaction, then claimed or kicked;
- `dispatch`: claims sent to the agents' queues; kicks; backpressure;
- `reply`: an agent's answer, fenced by lease and deadline (a success is one round trip);
- `expiry`: job occurrences skipped when not started within their schedule-to-start;
- `failure`: what follows a failed attempt or an errored step;
- `compensation`: undo in reverse order; cancel; an operator's resume;
- `events`: events recorded and announced to receivers of observed runs;
- `jobs`: seed 004's jobs (create, edit, pause, resume, delete, run now, backfill, preview);
  `jobs_dispatch`: the dispatcher that fires their occurrences; `scheduler.dispatcher.firing`: the overlap
  rules both apply (see `scheduler/jobs.md`).
- `longsteps`: paginated steps' pages (Checkpoint) and heartbeat steps' heartbeats (HeartbeatStatus).

Every state change itself is a transition in `scheduler.transitions` (SQL in `scheduler/sql/`).
"""

from scheduler.dispatcher.firing import Firing, JobStateError
from scheduler.dispatcher.tick import (
    DispatchResult,
    job_runs_settle,
    jobs_dispatch,
    jobs_dispatch_batch,
    jobs_dispatch_relay,
    jobs_dispatch_wake,
)
from scheduler.transitions import Claim

from .compensation import (
    RunNotCancellable,
    StepNotMarkable,
    run_cancel,
    run_compensate,
    run_give_up,
    run_resume_compensation,
    step_compensation_mark_done,
)
from .dispatch import (
    claims_dispatch,
    claims_kept,
    kick_pending_key,
    operations_in_flight,
    scheduler_instance_id,
    scheduler_kick_enqueue,
    scheduler_pump,
    step_claim_due,
)
from .events import event_record, events_announce, run_observe
from .expiry import runs_skip_unstarted
from .failure import failures_settle, step_errored_settle
from .holds import PauseRefused, holds_reconcile, pause_create, pause_of_owner, pause_resume
from .jobs import (
    Backfill,
    JobBusy,
    JobEdit,
    job_backfill,
    job_create,
    job_delete,
    job_pause,
    job_preview,
    job_resume,
    job_run_now,
    job_run_submit,
    job_update,
)
from .longsteps import LeaseLost, heartbeat_finish, page_begin, page_commit, step_heartbeat
from .reply import Outcome, ReplyResult, step_reply
from .submit import (
    COMPENSATION_SEQ_BASE,
    RunSpec,
    run_submit,
    run_validate_input,
    runs_submit_many,
    step_context,
    step_new,
)

__all__ = [
    "COMPENSATION_SEQ_BASE",
    "Backfill",
    "Claim",
    "DispatchResult",
    "Firing",
    "JobBusy",
    "JobEdit",
    "JobStateError",
    "LeaseLost",
    "Outcome",
    "PauseRefused",
    "ReplyResult",
    "RunNotCancellable",
    "RunSpec",
    "StepNotMarkable",
    "claims_dispatch",
    "claims_kept",
    "event_record",
    "events_announce",
    "failures_settle",
    "heartbeat_finish",
    "holds_reconcile",
    "job_backfill",
    "job_create",
    "job_delete",
    "job_pause",
    "job_preview",
    "job_resume",
    "job_run_now",
    "job_run_submit",
    "job_runs_settle",
    "job_update",
    "jobs_dispatch",
    "jobs_dispatch_batch",
    "jobs_dispatch_relay",
    "jobs_dispatch_wake",
    "kick_pending_key",
    "operations_in_flight",
    "page_begin",
    "page_commit",
    "pause_create",
    "pause_of_owner",
    "pause_resume",
    "run_cancel",
    "run_compensate",
    "run_give_up",
    "run_observe",
    "run_resume_compensation",
    "run_submit",
    "run_validate_input",
    "runs_skip_unstarted",
    "runs_submit_many",
    "scheduler_instance_id",
    "scheduler_kick_enqueue",
    "scheduler_pump",
    "step_claim_due",
    "step_compensation_mark_done",
    "step_context",
    "step_errored_settle",
    "step_heartbeat",
    "step_new",
    "step_reply",
]

"""The engine's state machine: every transition of a step and of a run, one named function each.

A transition is one conditional statement (or one PostgreSQL function, for the hot ones) whose
WHERE clause carries the state it leaves - and the lease, where there is one - so the rows it
touched are the concurrency check: two callers racing for the same row change it once. The SQL
lives in `scheduler/sql/` (`functions.sql`, installed by migrations; `queries.sql`, one named
statement per transition, loaded once); nothing here assembles SQL. Time is the database clock.

Transitions change rows and nothing else. What follows a transition - events to receivers,
alerts, compensation, a kick of the scheduler - is orchestration, in `scheduler/services/`.

The table of transitions (from, to, trigger, guard) is `scheduler/transitions.md`, beside this file.

The package: `statements` (the SQL by name), `results` (what transitions return), `steps`,
`long_steps` and `runs` (the transitions). Callers import `scheduler.transitions` and call the
transition by name; this file re-exports them as that public API.
"""

from __future__ import annotations

from scheduler.transitions.holds import (
    Reconciled,
    Released,
    holds_settle,
    occurrences_hold,
    pause_release,
    pauses_hold,
    runs_key_hold,
)
from scheduler.transitions.long_steps import (
    CheckpointState,
    Heartbeat,
    checkpoint_advance,
    checkpoint_page_begin,
    heartbeat_complete,
    step_continue,
    step_extend_by_heartbeat,
)
from scheduler.transitions.results import (
    Claim,
    Failed,
    FailedStep,
    RunObserved,
    Succeeded,
    Transitioned,
)
from scheduler.transitions.runs import (
    NewRuns,
    WrittenRun,
    run_end_compensation,
    run_fail,
    run_mark_compensating,
    run_reopen_compensation,
    runs_cancel_unstarted,
    runs_insert_many,
)
from scheduler.transitions.statements import (
    FUNCTIONS_FILE,
    QUERIES_FILE,
    SQL_DIR,
    SQLSTATE_RUN_OBSERVED,
    engine_queries,
    install_functions,
)
from scheduler.transitions.steps import (
    AttemptOutcome,
    Skipped,
    SkippedRun,
    Supervised,
    reply_ignored,
    run_skip_unstarted,
    step_advance,
    step_cancel_unstarted,
    step_claim,
    step_claim_many,
    step_compensation_retry,
    step_defer,
    step_due_for_supervision,
    step_fail,
    step_fail_permanent,
    step_first_delay,
    step_mark_compensating,
    step_mark_done,
    step_mark_started,
    step_requeue,
    step_resubmit,
    step_resubmit_in_place,
    step_resume,
    step_stop,
    step_succeed,
)

__all__ = [
    "FUNCTIONS_FILE",
    "QUERIES_FILE",
    "SQLSTATE_RUN_OBSERVED",
    "SQL_DIR",
    "AttemptOutcome",
    "CheckpointState",
    "Claim",
    "Failed",
    "FailedStep",
    "Heartbeat",
    "NewRuns",
    "Reconciled",
    "Released",
    "RunObserved",
    "Skipped",
    "SkippedRun",
    "Succeeded",
    "Supervised",
    "Transitioned",
    "WrittenRun",
    "checkpoint_advance",
    "checkpoint_page_begin",
    "engine_queries",
    "heartbeat_complete",
    "holds_settle",
    "install_functions",
    "occurrences_hold",
    "pause_release",
    "pauses_hold",
    "reply_ignored",
    "run_end_compensation",
    "run_fail",
    "run_mark_compensating",
    "run_reopen_compensation",
    "run_skip_unstarted",
    "runs_cancel_unstarted",
    "runs_insert_many",
    "runs_key_hold",
    "step_advance",
    "step_cancel_unstarted",
    "step_claim",
    "step_claim_many",
    "step_compensation_retry",
    "step_continue",
    "step_defer",
    "step_due_for_supervision",
    "step_extend_by_heartbeat",
    "step_fail",
    "step_fail_permanent",
    "step_first_delay",
    "step_mark_compensating",
    "step_mark_done",
    "step_mark_started",
    "step_requeue",
    "step_resubmit",
    "step_resubmit_in_place",
    "step_resume",
    "step_stop",
    "step_succeed",
]

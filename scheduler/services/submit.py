"""Submit: a run, all its step rows and its "received" event, written in one statement; then
get it going."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, router, transaction
from psycopg.types.json import Jsonb

from sasproject.logs import state_change
from scheduler import clock, transitions
from scheduler.ids import uuid7
from scheduler.models import Checkpoint, HeartbeatStatus, Run, Step
from scheduler.workflows import (
    StepContext,
    StepDef,
    Workflow,
    WorkflowInputError,
    get_workflow,
    workflow_concurrency,
)

from .dispatch import claimed_settle, scheduler_instance_id, scheduler_kick_enqueue
from .events import events_announce

COMPENSATION_SEQ_BASE = 1000


def step_context(run: Run, steps: Sequence[Step]) -> StepContext:
    """What a payload builder sees: the run's input, its steps' results and idempotency keys."""
    return StepContext(
        run_id=str(run.id),
        input=run.input,
        results={s.name: s.result for s in steps if s.result is not None},
        keys={s.name: s.idempotency_key for s in steps},
        owner_id=run.owner_id or 0,
    )


def step_row_policy(definition: StepDef, *, kind: str) -> dict[str, Any]:
    """The step's policy as its row stores it, copied from the definition at submit (an edited
    definition does not change runs in flight)."""
    return {
        "timeout": timedelta(seconds=definition.timeout),
        "queue_timeout": timedelta(seconds=definition.queue_timeout),
        "schedule_to_close": (
            timedelta(seconds=definition.deadline)
            if definition.deadline is not None and kind == Step.Kind.FORWARD
            else None
        ),
        "max_failures": definition.max_failures,
        "heartbeat_window": timedelta(seconds=definition.heartbeat) if definition.heartbeat else None,
        "backoff_base": definition.backoff_base,
        "backoff_max": definition.backoff_max,
    }


def step_new(run: Run, definition: StepDef, *, seq: int, kind: str, state: str) -> Step:
    """An unsaved step row of `run` from its definition (`step_row_policy`)."""
    return Step(
        run=run,
        name=definition.name,
        kind=kind,
        seq=seq,
        operation=definition.operation,
        process_state=state,
        idempotency_key=f"{run.id}:{definition.name}",
        priority=run.priority,
        deadline=run.deadline,
        owner_id=run.owner_id or 0,
        **step_row_policy(definition, kind=kind),
    )


def run_validate_input(*, workflow: str, input: Mapping[str, Any]) -> tuple[Workflow, dict[str, Any]]:
    """Clean `input` for `workflow` or raise WorkflowInputError. Writes nothing."""
    definition = get_workflow(workflow)
    if not isinstance(input, Mapping):
        raise WorkflowInputError({"input": "must be a JSON object"})
    cleaned = definition.validate(input)
    workflow_concurrency(definition, cleaned)
    return definition, cleaned


def run_submit(
    *,
    workflow: str,
    input: Mapping[str, Any],
    owner_id: int | None = None,
    priority: int = 0,
    deadline: datetime | None = None,
    correlation_id: str = "",
    kick: bool = True,
    job_id: int | None = None,
    observed: bool = False,
    scheduled_for: datetime | None = None,
    job_attempt: int = 0,
    not_before: datetime | None = None,
) -> Run:
    """Validate, then write the run, all its step rows and its "received" event in one
    statement (`runs_insert_many`); claim its first step or kick the scheduler. `job_id`: the
    Job this run is a firing of (`scheduled_for`, `job_attempt`: which occurrence and attempt;
    unique per job). `observed`: its events go to signal receivers (a webhook subscriber) - see
    `events.run_observe`. `not_before`: its first step is not claimed before then (a task's
    `run_after`, tasksbackend/); the scheduler is kicked for that time and the tick finds it too.

    Invariant: bad input raises WorkflowInputError before any row is written. Transaction: its
    own atomic block, or the caller's, joined without a savepoint (an order and its run commit
    together; every caller wants all or nothing, and a savepoint costs two round trips). If the
    kick is lost, the periodic tick claims the Pending first step anyway.
    """
    definition, cleaned = run_validate_input(workflow=workflow, input=input)
    if not -32768 <= priority <= 32767:
        raise WorkflowInputError({"priority": "must be between -32768 and 32767"})
    spec = RunSpec(
        definition=definition,
        input=cleaned,
        owner_id=owner_id,
        priority=priority,
        correlation_id=correlation_id,
        job_id=job_id,
        scheduled_for=scheduled_for,
        job_attempt=job_attempt,
        deadline=deadline,
        observed=observed,
    )
    with transaction.atomic(savepoint=False):
        # The run, its steps and its "received" event: one statement (runs_insert_many).
        new = _new_runs([spec])
        run_id = new.run_ids[0]
        written = _runs_write(new, [spec]).get(run_id)
        if written is None:
            # Only a job's occurrence can conflict (its unique job, scheduled_for, attempt).
            raise IntegrityError(
                f"job {job_id} already has a run for {scheduled_for} (attempt {job_attempt})"
            )
        run = _run_instance(spec, run_id=run_id, created_at=written.created_at)
        state_change(
            "run_received",
            "run %s (%s) received%s",
            run_id,
            definition.name,
            f" for job {job_id}" if job_id else "",
            run=run_id,
        )
        delayed = not_before is not None and transitions.step_first_delay(
            step_id=written.first_step_id, at=not_before
        )
        if kick:
            _run_start(first_step_id=written.first_step_id, not_before=not_before if delayed else None)
    return run


def _run_instance(spec: RunSpec, *, run_id: uuid.UUID, created_at: datetime) -> Run:
    """The Run row just written, as the model instance a caller gets (every column is known: no
    query)."""
    run = Run(
        id=run_id,
        workflow=spec.definition.name,
        input=spec.input,
        owner_id=spec.owner_id,
        priority=spec.priority,
        deadline=spec.deadline,
        state=Run.State.PENDING,
        cancel_requested=False,
        observed=spec.observed,
        job_id=spec.job_id,
        scheduled_for=spec.scheduled_for,
        job_attempt=spec.job_attempt,
        job_settled=False,
        correlation_id=spec.correlation_id,
        error="",
        created_at=created_at,
        updated_at=created_at,
        finished_at=None,
    )
    run._state.adding = False
    run._state.db = router.db_for_write(Run)
    return run


def long_steps_create(steps: Sequence[Step], definitions: Sequence[StepDef]) -> None:
    """The Checkpoint row of each paginated step and the HeartbeatStatus row of each heartbeat step,
    written with the steps (so a page's transaction and a heartbeat only ever update).
    `definitions[i]` is the definition of `steps[i]`."""
    pairs = list(zip(steps, definitions, strict=True))
    checkpoints = [
        Checkpoint(step=step, run_id=step.run_id, page_size=d.page_size)
        for step, d in pairs
        if d.page_size is not None
    ]
    statuses = [
        HeartbeatStatus(step=step, run_id=step.run_id) for step, d in pairs if d.heartbeat is not None
    ]
    if checkpoints:
        Checkpoint.objects.bulk_create(checkpoints)
    if statuses:
        HeartbeatStatus.objects.bulk_create(statuses)


def _run_start(*, first_step_id: int, not_before: datetime | None = None) -> None:
    """Get a new run going. The scheduler's claim runs right here, in the submitter's transaction
    (the pattern's actors are logical, as with inline replies), when the first step's bulkhead
    has a free slot for its owner (scheduler/bulkheads.py): that saves the kick's broker hop and
    task. Otherwise - a burst - the scheduler is kicked after commit and claims as capacity frees
    up. A first step delayed until `not_before` (`step_first_delay`): a kick is sent for then."""
    if not_before is not None:
        wait = max(0.0, (not_before - clock.now()).total_seconds())
        transaction.on_commit(lambda: scheduler_kick_enqueue(countdown=wait))
        return
    if settings.SAS["CLAIM_ON_SUBMIT"]:
        claims = claimed_settle(
            transitions.step_claim(
                step_ids=[first_step_id],
                instance=scheduler_instance_id(),
                admit=True,
            )
        )
        if claims:
            return
    transaction.on_commit(scheduler_kick_enqueue)


def step_advance_built(*, step_id: int) -> None:
    """Build the payload of a step that reads earlier results, and make it Pending
    (`step_advance`). Transaction: the caller's."""
    step = Step.objects.select_related("run").get(pk=step_id)
    run: Run = step.run
    steps = list(Step.objects.filter(run_id=run.id).order_by("seq"))
    payload = get_workflow(run.workflow).step(step.name).payload(step_context(run, steps))
    transitions.step_advance(step_id=step_id, payload=payload)


@dataclass(frozen=True)
class RunSpec:
    """One run for `runs_submit_many`: its input already cleaned by `run_validate_input`."""

    definition: Workflow
    input: dict[str, Any]
    owner_id: int | None
    priority: int = 0
    correlation_id: str = ""
    job_id: int | None = None
    scheduled_for: datetime | None = None
    job_attempt: int = 0
    deadline: datetime | None = None
    observed: bool = False


def runs_submit_many(specs: Sequence[RunSpec], *, kick: bool = True) -> list[uuid.UUID | None]:
    """Write many runs at once - runs, forward steps and "received" events in one statement
    (`transitions.runs_insert_many`) - with their first steps Pending; the scheduler is kicked
    after commit (one coalesced kick) and claims them as capacity allows. For the jobs
    dispatcher, which starts many runs in one transaction (and writes their occurrences'
    history rows itself, `job_history_open`). Returns the runs' ids, in the order of `specs` -
    None for a job occurrence (and attempt) that already had a run, which is left as it was
    (the unique constraint, ON CONFLICT).
    Invariant: as `run_submit` (inputs are validated by the caller, before anything is
    written); payloads are built here, as for `run_submit`. Transaction: the caller's
    (one statement)."""
    if not specs:
        return []
    new = _new_runs(specs)
    written = _runs_write(new, specs)
    if kick and written:
        transaction.on_commit(scheduler_kick_enqueue)
    return [run_id if run_id in written else None for run_id in new.run_ids]


def _new_runs(specs: Sequence[RunSpec]) -> transitions.NewRuns:
    """The column arrays of `specs`' runs and forward steps (new ids). Payloads are built now,
    unless a step's definition says its payload needs earlier steps' results (then
    `step_advance` builds it when the step comes due): a success reply can then move the next
    step to Pending inside its one statement."""
    new = transitions.NewRuns()
    # What depends on the definition only - the window, the steps and their policies (the
    # run's shape) - once per definition in the batch, not once per run: a jobs batch is
    # hundreds of runs of a few workflows (bench/README.md, "Issue 20, fourth session").
    shapes: dict[int, tuple[int, timedelta | None, list[tuple[int, StepDef, bool]]]] = {}
    for spec in specs:
        definition = spec.definition
        shape = shapes.get(id(definition))
        if shape is None:
            shape = shapes[id(definition)] = _shape_add(new, definition, shape_id=len(shapes))
        shape_id, window, steps = shape
        run_id = uuid7()
        new.run_ids.append(run_id)
        new.workflows.append(definition.name)
        new.inputs.append(Jsonb(spec.input))
        new.owner_ids.append(spec.owner_id)
        new.priorities.append(spec.priority)
        new.job_ids.append(spec.job_id)
        new.correlation_ids.append(spec.correlation_id)
        new.scheduled_for.append(spec.scheduled_for)
        new.job_attempts.append(spec.job_attempt)
        new.deadlines.append(spec.deadline)
        new.observed.append(spec.observed)
        new.schedule_to_start.append(window if spec.job_id is not None else None)
        new.shapes.append(shape_id)
        ctx = StepContext(
            run_id=str(run_id),
            input=spec.input,
            results={},
            keys={d.name: f"{run_id}:{d.name}" for _, d, _ in steps},
            owner_id=spec.owner_id or 0,
        )
        for index, step_def, built in steps:
            if index == 0:
                new.first_payloads.append(Jsonb(step_def.payload(ctx)))
            elif built:
                new.later_run_ids.append(run_id)
                new.later_seqs.append(index)
                new.later_payloads.append(Jsonb(step_def.payload(ctx)))
    return new


def _shape_add(
    new: transitions.NewRuns, definition: Workflow, *, shape_id: int
) -> tuple[int, timedelta | None, list[tuple[int, StepDef, bool]]]:
    """Add `definition`'s forward steps and their policies to `new` as shape `shape_id`. Returns
    (the shape's id, its schedule-to-start window for job runs, (seq, step, payload built at
    submit) per step)."""
    steps = []
    for index, step_def in enumerate(definition.steps):
        policy = step_row_policy(step_def, kind=Step.Kind.FORWARD)
        new.shape_ids.append(shape_id)
        new.shape_seqs.append(index)
        new.shape_names.append(step_def.name)
        new.shape_operations.append(step_def.operation)
        new.shape_timeouts.append(policy["timeout"])
        new.shape_queue_timeouts.append(policy["queue_timeout"])
        new.shape_schedule_to_close.append(policy["schedule_to_close"])
        new.shape_max_failures.append(policy["max_failures"])
        new.shape_heartbeat_windows.append(policy["heartbeat_window"])
        new.shape_backoff_base.append(policy["backoff_base"])
        new.shape_backoff_max.append(policy["backoff_max"])
        steps.append((index, step_def, index == 0 or not step_def.payload_needs_results))
    window = definition.schedule_to_start_window()
    return shape_id, timedelta(seconds=window) if window else None, steps


def _runs_write(
    new: transitions.NewRuns, specs: Sequence[RunSpec]
) -> dict[uuid.UUID, transitions.WrittenRun]:
    """Write `new` (one statement), then the long steps' rows of the runs that have them, and
    announce the "received" events of observed runs. The runs written, by id."""
    written = transitions.runs_insert_many(new=new)
    _concurrency_keys_take(new, specs, written)
    _long_steps_of_runs_create(
        {
            run_id: spec.definition
            for run_id, spec in zip(new.run_ids, specs, strict=True)
            if run_id in written and _has_long_steps(spec.definition)
        }
    )
    events_announce(
        [
            written[run_id].event
            for run_id, spec in zip(new.run_ids, specs, strict=True)
            if spec.observed and run_id in written
        ]
    )
    return written


def _concurrency_keys_take(
    new: transitions.NewRuns, specs: Sequence[RunSpec], written: Mapping[uuid.UUID, transitions.WrittenRun]
) -> None:
    """The written runs whose workflow gives their input a concurrency key take it: they wait
    for a slot or are admitted (`transitions.runs_key_hold`, issue 30). Runs without a key cost
    nothing here."""
    run_ids: list[uuid.UUID] = []
    keys: list[str] = []
    limits: list[int] = []
    for run_id, spec in zip(new.run_ids, specs, strict=True):
        found = workflow_concurrency(spec.definition, spec.input) if run_id in written else None
        if found is not None:
            run_ids.append(run_id)
            keys.append(found.key)
            limits.append(found.limit)
    if run_ids:
        transitions.runs_key_hold(run_ids=run_ids, keys=keys, limits=limits)


def _has_long_steps(definition: Workflow) -> bool:
    return any(d.page_size is not None or d.heartbeat is not None for d in definition.steps)


def _long_steps_of_runs_create(definitions: Mapping[uuid.UUID, Workflow]) -> None:
    """`long_steps_create` for runs written in bulk (their step rows read back by run)."""
    if not definitions:
        return
    steps: list[Step] = []
    step_defs: list[StepDef] = []
    rows = Step.objects.filter(run_id__in=list(definitions), kind=Step.Kind.FORWARD).order_by("run_id", "seq")
    for step in rows.only("id", "run_id", "name"):
        steps.append(step)
        step_defs.append(definitions[step.run_id].step(step.name))
    long_steps_create(steps, step_defs)

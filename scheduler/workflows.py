"""Declarative workflow definitions.

A workflow is an ordered list of steps; each step names the agent operation (a Celery task name)
that performs it, its complete-by window, failure limit, backoff and optional compensation.
Adding a workflow means writing a `Workflow(...)` and calling `register()` - the engine does not
change. `manage.py startworkflow NAME` writes an app with one (docs/developing/workflows.md);
`orders/workflows.py` is a three-step saga with compensations, its operations in
`orders/tasks.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from django.conf import settings


class WorkflowInputError(ValueError):
    """Bad input for a workflow. `errors` maps field names to messages, like a form's errors."""

    def __init__(self, errors: Mapping[str, list[str] | str]) -> None:
        self.errors: dict[str, list[str]] = {
            key: [value] if isinstance(value, str) else list(value) for key, value in errors.items()
        }
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in self.errors.items()))


class WorkflowNotPermitted(WorkflowInputError):
    """Staff-only work asked for by (or for) someone who is not staff: a field error on
    `workflow`, raised before anything is written (see `workflow_permitted`)."""


@dataclass(frozen=True)
class StepContext:
    """What a payload builder sees: the run input, earlier steps' results and idempotency keys,
    and the run's owner."""

    run_id: str
    input: Mapping[str, Any]
    results: Mapping[str, Any]
    keys: Mapping[str, str]
    # The run's owner as the engine stores it (0: a run nobody owns) - never from the input.
    owner_id: int = 0


PayloadBuilder = Callable[[StepContext], dict[str, Any]]


def _empty_payload(ctx: StepContext) -> dict[str, Any]:
    return {}


# The shapes a step's result may have for the pages (StepDef.output).
STEP_OUTPUTS = ("value", "http")


def step_label_default(name: str) -> str:
    """A readable label for a step name: "reserve_inventory" -> "Reserve inventory"."""
    words = name.replace("_", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:]


def step_label_of(workflow: str, name: str) -> str:
    """The label of step `name` of workflow `workflow`, as every page shows it (the order page,
    the job's run page - its steps, attempts and timeline -, the admin's timeline): the
    workflow's own label, or the default label of its name for a workflow (or a step) no
    longer registered. The one label function (issue 28: a step was `call` in one table and
    "HTTP call" in the timeline)."""
    try:
        return get_workflow(workflow).step_label(name)
    except WorkflowInputError:  # a workflow no longer registered
        return step_label_default(name)


@dataclass(frozen=True)
class StepDef:
    name: str
    # The agent operation: a Celery task name; its queue comes from CELERY_TASK_ROUTES.
    operation: str
    # The complete-by window of one attempt, in seconds (from when an agent starts it).
    timeout: float = 30.0
    # How long a dispatched attempt may wait for an agent to start it (workers down, busy or
    # restarting) before it is sent again - no failure counted.
    queue_timeout: float = 10.0
    # The whole step's deadline from its first claim, in seconds (None: unbounded). Past it
    # the step stops trying and the run compensates. Compensation steps ignore it: an undo
    # never gives up on its own.
    deadline: float | None = None
    # Attempts that reached the service and failed (timed out, 5xx) before a forward step is
    # marked Error. For a compensation: failures after which an operator is alerted, while it
    # keeps retrying (capped by backoff_max).
    max_failures: int = 3
    backoff_base: float = 1.0
    backoff_max: float = 60.0
    payload: PayloadBuilder = _empty_payload
    # False (the usual case): the payload is built from the run's input and the steps'
    # idempotency keys alone, when the run is submitted. True: it reads earlier steps' results
    # (`ctx.results`), so it is built when the step comes due - one more round trip per step.
    payload_needs_results: bool = False
    compensation: StepDef | None = None
    # What people read (status page, admin): "Charge the card". Default: from the name,
    # "charge_payment" -> "Charge payment".
    label: str = ""
    # A paginated step (seed 004's "paginate the job processing"): its agent processes a large
    # input one page of `page_size` rows per attempt, each page's effect committed with the
    # step's `Checkpoint` in one transaction fenced by the lease (agents.paged). `timeout` is
    # then one page's window; after a page the step is sent again at once, no failure counted.
    page_size: int | None = None
    # A heartbeat step (seed 004's JobStatus, for work that cannot be paged): its agent calls
    # the heartbeat API while it works (agents.heartbeat), and each heartbeat moves the step's
    # complete-by to now + `heartbeat` seconds. `timeout` is the window before the first one.
    heartbeat: float | None = None
    # Refusal codes of this step's remote service (the `error` of its 4xx body, e.g.
    # "card_declined") whose cause is in the run's input: the same request is refused again,
    # whatever its idempotency key. The bulk resubmission's dry run leaves such steps out
    # unless the operator picks them (scheduler/keys.py, `step_refusal_repeats`; issue 28).
    input_refusals: tuple[str, ...] = ()
    # What its result is, for the customer's run page and API (scheduler/outputs.py, issue
    # 28): "value" (a JSON value, shown as it is) or "http" (an HTTP answer: status, headers,
    # body excerpt).
    output: str = "value"

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", step_label_default(self.name))
        if self.timeout <= 0:
            raise ValueError(f"step {self.name}: timeout must be positive")
        if self.max_failures < 1:
            raise ValueError(f"step {self.name}: max_failures must be at least 1")
        if self.queue_timeout <= 0 or (self.deadline is not None and self.deadline <= 0):
            raise ValueError(f"step {self.name}: queue_timeout and deadline must be positive")
        if self.page_size is not None and self.page_size < 1:
            raise ValueError(f"step {self.name}: page_size must be at least 1")
        if self.heartbeat is not None and self.heartbeat <= 0:
            raise ValueError(f"step {self.name}: heartbeat must be positive")
        if self.output not in STEP_OUTPUTS:
            raise ValueError(f"step {self.name}: output must be one of {', '.join(STEP_OUTPUTS)}")
        if self.page_size is not None and self.heartbeat is not None:
            raise ValueError(f"step {self.name}: a step is paginated or heartbeats, not both")
        if self.compensation is not None and (
            self.compensation.page_size is not None or self.compensation.heartbeat is not None
        ):
            raise ValueError(f"step {self.name}: a compensation cannot be paginated or heartbeat")


def step_policy(conf: Mapping[str, Any]) -> dict[str, Any]:
    """StepDef keyword arguments from a settings dict: STEP_TIMEOUT, MAX_FAILURES,
    BACKOFF_BASE, BACKOFF_MAX and, when present, STEP_DEADLINE (see SAS_WEBHOOKS)."""
    policy: dict[str, Any] = {
        "timeout": float(conf["STEP_TIMEOUT"]),
        "max_failures": int(conf["MAX_FAILURES"]),
        "backoff_base": float(conf["BACKOFF_BASE"]),
        "backoff_max": float(conf["BACKOFF_MAX"]),
    }
    if conf.get("STEP_DEADLINE") is not None:
        policy["deadline"] = float(conf["STEP_DEADLINE"])
    return policy


CONCURRENCY_KEY_MAX = 200
CONCURRENCY_LIMIT_MAX = 1000


@dataclass(frozen=True)
class ConcurrencyKey:
    """A run's concurrency key (scoped by its owner by the engine) and the most runs of that key
    that may be unfinished at once."""

    key: str
    limit: int


def concurrency_clean(
    value: object, errors: dict[str, list[str]], *, field_name: str = "concurrency"
) -> dict[str, Any] | None:
    """A workflow input's optional `{"key": "...", "limit": n}` (for a workflow whose callers choose
    the key: `http.call`), cleaned; errors under `field_name`. None when absent."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) - {"key", "limit"}:
        errors[field_name] = ['must be an object {"key": "...", "limit": n}']
        return None
    key, limit = value.get("key"), value.get("limit", 1)
    if not isinstance(key, str) or not key.strip() or len(key) > CONCURRENCY_KEY_MAX:
        errors[field_name] = [f"key must be a non-empty string of at most {CONCURRENCY_KEY_MAX} characters"]
        return None
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= CONCURRENCY_LIMIT_MAX:
        errors[field_name] = [f"limit must be a whole number from 1 to {CONCURRENCY_LIMIT_MAX}"]
        return None
    return {"key": key.strip(), "limit": limit}


def concurrency_of_input(data: Mapping[str, Any]) -> ConcurrencyKey | None:
    """`Workflow.concurrency` for a workflow whose input carries a cleaned `concurrency` field."""
    value = data.get("concurrency")
    return ConcurrencyKey(key=value["key"], limit=value["limit"]) if value else None


def workflow_concurrency(workflow: Workflow, data: Mapping[str, Any]) -> ConcurrencyKey | None:
    """The concurrency key of a run of `workflow` with cleaned input `data`, or None; a key the
    workflow computed badly is a WorkflowInputError (raised before anything is written)."""
    if workflow.concurrency is None:
        return None
    found = workflow.concurrency(data)
    if found is None:
        return None
    if not found.key or len(found.key) > CONCURRENCY_KEY_MAX or not 1 <= found.limit <= CONCURRENCY_LIMIT_MAX:
        raise WorkflowInputError(
            {"concurrency": f"workflow {workflow.name} computed an invalid key or limit"}
        )
    return found


@dataclass(frozen=True)
class Workflow:
    name: str
    steps: list[StepDef]
    # Cleans the input or raises WorkflowInputError. Runs before anything is written.
    validate: Callable[[Mapping[str, Any]], dict[str, Any]] = field(default=lambda data: dict(data))
    # For people choosing a workflow (job forms, the API): a short name, a sentence, and the
    # input's JSON Schema (https://json-schema.org/) when the workflow publishes one. `validate`
    # stays the rule; the schema describes it for forms and clients.
    label: str = ""
    description: str = ""
    input_schema: Mapping[str, Any] | None = None
    # A valid input, shown beside the description where people choose a workflow (the job
    # form, the admin): what to type. None: the workflow shows none.
    input_example: Mapping[str, Any] | None = None
    # May a customer (a user who is not staff) schedule it - make a job of it, or start one?
    # Default no: a workflow is staff-only work (internal plumbing such as webhook deliveries,
    # work on data every tenant shares such as the catalogue) until its author says it is safe
    # for any customer to aim at with any input, and that its runs only touch the owner's own
    # data. The rule is `workflow_permitted`; docs/using/jobs-targets.md ("Who may schedule what").
    customer_schedulable: bool = False
    # May anyone make a job of it (or run one from a job)? False: the engine starts it itself
    # for a row of its own (a webhook delivery, an alert notification), and its runs act with
    # an identity taken from that row - a job of it would choose the row, the body or the URL
    # by its input. Refused to everyone, staff and superusers included (issue 26).
    job_target: bool = True
    # Schedule-to-start of a job occurrence's run (issue 18): seconds its first step may wait
    # to be claimed before the occurrence is skipped ("setting": SAS["SCHEDULE_TO_START"];
    # None or 0: never). Runs submitted directly (orders through their API) never expire.
    schedule_to_start: float | Literal["setting"] | None = "setting"
    # At most N at a time per key (issue 30, scheduler/holds.md): from the cleaned input, the
    # key and its limit (runs of one owner with the same key run at most `limit` at a time, the
    # others wait in order, holding no worker), or None for this input. None: never limited.
    concurrency: Callable[[Mapping[str, Any]], ConcurrencyKey | None] | None = None

    def __post_init__(self) -> None:
        names = [s.name for s in self.steps] + [s.compensation.name for s in self.steps if s.compensation]
        if len(names) != len(set(names)):
            raise ValueError(f"workflow {self.name}: step names must be unique")
        if not self.steps:
            raise ValueError(f"workflow {self.name}: needs at least one step")
        if not self.label:
            object.__setattr__(self, "label", step_label_default(self.name))

    def schedule_to_start_window(self) -> float | None:
        """Seconds a job occurrence's first step may wait to start, or None (never expires)."""
        value = self.schedule_to_start
        if value == "setting":
            value = settings.SAS["SCHEDULE_TO_START"]
        return float(value) if value else None

    def step_label(self, name: str) -> str:
        """The label of step `name`; a step this definition no longer has (a run submitted
        before the workflow changed) gets the default label of its name."""
        try:
            return self.step(name).label
        except KeyError:
            return step_label_default(name)

    def step(self, name: str) -> StepDef:
        for s in self.steps:
            if s.name == name:
                return s
            if s.compensation and s.compensation.name == name:
                return s.compensation
        raise KeyError(f"workflow {self.name} has no step {name!r}")


_registry: dict[str, Workflow] = {}


def register(workflow: Workflow) -> Workflow:
    existing = _registry.get(workflow.name)
    if existing is not None and existing is not workflow:
        raise ValueError(f"workflow {workflow.name!r} is already registered")
    _registry[workflow.name] = workflow
    return workflow


def get_workflow(name: str) -> Workflow:
    try:
        return _registry[name]
    except KeyError:
        raise WorkflowInputError({"workflow": f"unknown workflow {name!r}"}) from None


def registered_workflows() -> list[str]:
    return sorted(_registry)


def workflow_permitted(workflow: Workflow, *, staff: bool) -> bool:
    """The one rule of who may schedule what: a workflow that is no job target is nobody's; a
    customer-schedulable one is anyone's; every other is staff-only work. `staff`: the person
    acting (or the job's owner, when a run is made for them) may do staff work
    (`scheduler.permissions.staff_may`)."""
    return workflow.job_target and (workflow.customer_schedulable or staff)


def workflow_permit(workflow: Workflow, *, staff: bool, owner: bool = False) -> None:
    """Raise WorkflowNotPermitted (a field error on `workflow`) unless `workflow_permitted`.
    `owner`: the check is about the job's owner, not the person acting (the message says so)."""
    if not workflow.job_target:
        raise WorkflowNotPermitted(
            {"workflow": f"{workflow.name!r} is internal: the engine starts it itself, it is never a job"}
        )
    if not workflow_permitted(workflow, staff=staff):
        who = (
            "the job's owner is not staff holding the staff-work permission"
            if owner
            else "only staff holding the staff-work permission (the Operators role) can schedule it"
        )
        raise WorkflowNotPermitted({"workflow": f"{workflow.name!r} is staff-only work: {who}"})


def workflows_permitted(*, staff: bool) -> list[Workflow]:
    """The registered workflows someone may pick (customer-schedulable ones first, then by
    name): what a job form offers."""
    found = [w for w in (_registry[n] for n in sorted(_registry)) if workflow_permitted(w, staff=staff)]
    return sorted(found, key=lambda w: not w.customer_schedulable)

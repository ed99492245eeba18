"""Schedulable Celery tasks: a project's own task, run by a job as a one-step workflow.

    from agents.schedulable import schedulable

    @schedulable(label="Purge old webhook deliveries", timeout=120)
    @shared_task(name="webhooks.purge_deliveries")
    def purge_deliveries(*, older_than_days: int = 30) -> dict[str, int]: ...

registers the workflow `task:webhooks.purge_deliveries`: staff-only work, as every schedulable
task is unless it says `customer_schedulable=True` (a task runs in our own process with our own
credentials; say so only for one that touches nothing but the owner's data, whatever its
arguments - docs/using/jobs-targets.md, "Who may schedule what"). Its input is the task's arguments,
`{"args": [...], "kwargs": {...}}` (JSON only), checked before anything is written against the
function's signature: unknown or missing arguments, and arguments of the wrong JSON type where
the annotation says (int, float, str, bool, list, dict, optionally `| None`), are field errors.
Its one step, `run`, is the agent operation `agents.tasks.run` (queue `agent.tasks`), which
calls the task's function in the agent worker's process - so a task run by a job gets the
claim, the complete-by window (a Celery soft time limit at complete-by stops it), the step's
retries with backoff and the supervisor, like any step; its return value (JSON) becomes the
step's result.

The module that defines the task must be imported when Django starts (from the app's
`AppConfig.ready()`, as for signal receivers), so that the web, the schedulers and the agents
all know the workflow. Exceptions: `agents.base.TransientFault`, a lost database connection,
`ConnectionError`, `TimeoutError`, and those in `retry_on` or in the task's own `autoretry_for`
are transient (the step retries, up to `max_failures`); any other exception is permanent (the
step errors, the run ends Compensated). A task that must not run twice for one attempt can take
a keyword argument `idempotency_key`: it gets the step's key, stable across retries.
"""

from __future__ import annotations

import inspect
import json
import logging
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.db import InterfaceError, OperationalError

from scheduler.workflows import StepContext, StepDef, Workflow, WorkflowInputError, register

from .base import AgentTask
from .breaker import NoBreaker
from .faults import PermanentFault, RetryPolicy, TransientFault

logger = logging.getLogger(__name__)

TASK_WORKFLOW_PREFIX = "task:"
TASK_OPERATION = "agents.tasks.run"
# The argument the engine fills in itself (the step's idempotency key).
RESERVED_ARGUMENT = "idempotency_key"
ARGUMENTS_MAX_BYTES = 16 * 1024
RESULT_MAX_BYTES = 16 * 1024
DEFAULT_TRANSIENT: tuple[type[BaseException], ...] = (
    TransientFault,
    OperationalError,
    InterfaceError,
    ConnectionError,
    TimeoutError,
)


def call_arguments_shape(data: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any], dict[str, list[str]]]:
    """A task call's input {"args": [...], "kwargs": {...}}: its arguments (empty where
    malformed) and the errors of its shape, by field (a schedulable task's run, and a Django
    task's: tasksbackend)."""
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(data) - {"args", "kwargs"})
    if unknown:
        errors["non_field_errors"] = [f"unknown field(s): {', '.join(map(str, unknown))}"]
    args, kwargs = data.get("args", []), data.get("kwargs", {})
    if not isinstance(args, list):
        errors["args"] = ["must be a list"]
        args = []
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        errors["kwargs"] = ["must be an object"]
        kwargs = {}
    return args, kwargs, errors


# JSON Schema type names for the annotations we check.
_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


@dataclass(frozen=True)
class Parameter:
    """One argument of a schedulable task, as a form shows it."""

    name: str
    # "positional" (args only), "either" (args or kwargs), "keyword" (kwargs only)
    kind: str
    required: bool
    # The default, when it is a JSON value (else None).
    default: Any
    # JSON Schema type name, or "" when the annotation says nothing we check.
    type: str
    nullable: bool

    def check(self, value: object) -> str:
        """An error message for `value`, or ""."""
        if value is None:
            return "" if self.nullable or not self.type else "must not be null"
        if not self.type:
            return ""
        ok = {
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "string": isinstance(value, str),
            "boolean": isinstance(value, bool),
            "array": isinstance(value, list),
            "object": isinstance(value, dict),
        }[self.type]
        return "" if ok else f"must be {'an' if self.type[0] in 'aeiou' else 'a'} {self.type}"

    def schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {}
        if self.type:
            schema["type"] = [self.type, "null"] if self.nullable else self.type
        if not self.required:
            schema["default"] = self.default
        return schema


@dataclass(frozen=True)
class SchedulableTask:
    """A task marked `@schedulable`: what runs it, and its arguments' rules."""

    name: str
    label: str
    description: str
    task: Task
    parameters: tuple[Parameter, ...]
    extra_args: bool
    extra_kwargs: bool
    wants_key: bool
    transient: tuple[type[BaseException], ...]
    check: Callable[[dict[str, Any]], None] | None
    customer_schedulable: bool = False
    # A valid input to show people ({"args": [...], "kwargs": {...}}); None: one is made from
    # the arguments' defaults (`input_example()`).
    example: Mapping[str, Any] | None = None

    @property
    def workflow(self) -> str:
        return TASK_WORKFLOW_PREFIX + self.name

    def validate(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """Clean a workflow input {"args": [...], "kwargs": {...}} or raise WorkflowInputError."""
        args, kwargs, errors = call_arguments_shape(data)
        try:
            size = len(json.dumps({"args": args, "kwargs": kwargs}, allow_nan=False).encode())
        except (TypeError, ValueError):
            raise WorkflowInputError(
                {**errors, "non_field_errors": ["arguments must be JSON values"]}
            ) from None
        if size > ARGUMENTS_MAX_BYTES:
            raise WorkflowInputError(
                {"non_field_errors": [f"arguments: at most {ARGUMENTS_MAX_BYTES} bytes"]}
            )
        if not errors:
            self._bind(args, kwargs, errors)
        if errors:
            raise WorkflowInputError(errors)
        return {"args": list(args), "kwargs": dict(kwargs)}

    def _bind(self, args: list[Any], kwargs: dict[str, Any], errors: dict[str, list[str]]) -> None:
        positional = [p for p in self.parameters if p.kind != "keyword"]
        by_name = {p.name: p for p in self.parameters if p.kind != "positional"}
        bound: dict[str, Any] = {}
        if len(args) > len(positional) and not self.extra_args:
            errors.setdefault("args", []).append(
                f"takes at most {len(positional)} positional argument(s), {len(args)} given"
            )
        for parameter, value in zip(positional, args, strict=False):
            bound[parameter.name] = value
        for name, value in kwargs.items():
            if name == RESERVED_ARGUMENT and self.wants_key:
                errors.setdefault("kwargs", []).append(f"{name}: set by the engine")
            elif name in bound:
                errors.setdefault("kwargs", []).append(f"{name}: given both in args and in kwargs")
            elif name in by_name or self.extra_kwargs:
                bound[name] = value
            else:
                errors.setdefault("kwargs", []).append(f"{name}: unknown argument")
        missing = [p for p in self.parameters if p.required and p.name not in bound]
        for absent in missing:
            field = "args" if absent.kind == "positional" else "kwargs"
            errors.setdefault(field, []).append(f"{absent.name}: missing required argument")
        named = {p.name: p for p in self.parameters}
        for name, value in bound.items():
            known = named.get(name)
            message = known.check(value) if known else ""
            if message:
                field = "args" if name not in kwargs else "kwargs"
                errors.setdefault(field, []).append(f"{name}: {message}")
        if not errors and self.check is not None:
            defaults = {p.name: p.default for p in self.parameters if not p.required}
            self.check({**defaults, **bound})

    def input_schema(self) -> dict[str, Any]:
        """The input's JSON Schema, for forms and API clients."""
        keyword = [p for p in self.parameters if p.kind != "positional"]
        positional = [p for p in self.parameters if p.kind == "positional"]
        kwargs_schema: dict[str, Any] = {
            "type": "object",
            "properties": {p.name: p.schema() for p in keyword},
            "additionalProperties": self.extra_kwargs,
        }
        required = [p.name for p in keyword if p.required]
        if required:
            kwargs_schema["required"] = required
        args_schema: dict[str, Any] = {"type": "array", "prefixItems": [p.schema() for p in positional]}
        if not self.extra_args:
            args_schema["maxItems"] = len(positional)
        return {
            "type": "object",
            "additionalProperties": False,
            "properties": {"args": args_schema, "kwargs": kwargs_schema},
        }

    def input_example(self) -> dict[str, Any]:
        """A valid input to show: the given example, else the keyword arguments with their
        defaults (a required one as a placeholder of its type)."""
        if self.example is not None:
            return dict(self.example)
        placeholders = {
            "integer": 1,
            "number": 1.0,
            "string": "",
            "boolean": False,
            "array": [],
            "object": {},
        }
        args = [placeholders.get(p.type) for p in self.parameters if p.kind == "positional" and p.required]
        kwargs = {
            p.name: p.default if not p.required else placeholders.get(p.type)
            for p in self.parameters
            if p.kind != "positional"
        }
        return {"args": args, "kwargs": kwargs}

    def call(self, *, args: Sequence[Any], kwargs: Mapping[str, Any], idempotency_key: str) -> Any:
        """Run the task's function here, in this process (`Task.__call__`: as Celery runs a task
        body, with a request context). Raises TransientFault / PermanentFault."""
        extra = {RESERVED_ARGUMENT: idempotency_key} if self.wants_key else {}
        try:
            result = self.task(*args, **kwargs, **extra)
        except (SoftTimeLimitExceeded, TransientFault, PermanentFault):
            raise
        except self.transient as exc:
            raise TransientFault(f"{self.name}: {exc.__class__.__name__}: {exc}") from exc
        except Exception as exc:
            logger.exception("schedulable task %s failed", self.name)
            raise PermanentFault(f"{self.name}: {exc.__class__.__name__}: {exc}") from exc
        return result_jsonable(result)


def result_jsonable(result: Any) -> Any:
    """A task's return value as a step result: JSON as it is; anything else as its text; and
    large values cut to RESULT_MAX_BYTES."""
    try:
        text = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError):
        text = json.dumps(repr(result))
        result = repr(result)
    if len(text.encode()) > RESULT_MAX_BYTES:
        return {"truncated": True, "text": text[: RESULT_MAX_BYTES // 2]}
    return result


_registry: dict[str, SchedulableTask] = {}


def _json_type(annotation: Any) -> tuple[str, bool]:
    """(JSON Schema type, nullable) for an annotation; ("", True) if we do not check it."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return "", True
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        nullable = len(members) < len(typing.get_args(annotation))
        if len(members) == 1:
            kind, _ = _json_type(members[0])
            return kind, nullable
        return "", True
    return _JSON_TYPES.get(origin or annotation, ""), False


def _parameters(task: Task) -> tuple[tuple[Parameter, ...], bool, bool, bool]:
    function = task.run  # bound for `bind=True` tasks: `self` is not an argument
    signature = inspect.signature(function)
    try:
        hints = typing.get_type_hints(getattr(function, "__func__", function))
    except Exception:  # an annotation that does not resolve: check nothing for it
        hints = {}
    parameters: list[Parameter] = []
    extra_args = extra_kwargs = wants_key = False
    kinds = {
        inspect.Parameter.POSITIONAL_ONLY: "positional",
        inspect.Parameter.POSITIONAL_OR_KEYWORD: "either",
        inspect.Parameter.KEYWORD_ONLY: "keyword",
    }
    for p in signature.parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            extra_args = True
            continue
        if p.kind is inspect.Parameter.VAR_KEYWORD:
            extra_kwargs = True
            continue
        if p.name == RESERVED_ARGUMENT:
            wants_key = True
            continue
        kind, nullable = _json_type(hints.get(p.name, inspect.Parameter.empty))
        default = None if p.default is inspect.Parameter.empty else p.default
        try:
            json.dumps(default)
        except TypeError:
            default = None
        parameters.append(
            Parameter(
                name=p.name,
                kind=kinds[p.kind],
                required=p.default is inspect.Parameter.empty,
                default=default,
                type=kind,
                nullable=nullable or p.default is None,
            )
        )
    return tuple(parameters), extra_args, extra_kwargs, wants_key


def schedulable(
    task: Task | None = None,
    *,
    label: str = "",
    description: str = "",
    timeout: float = 60.0,
    max_failures: int = 3,
    backoff_base: float = 1.0,
    backoff_max: float = 60.0,
    deadline: float | None = None,
    retry_on: tuple[type[BaseException], ...] = (),
    validate: Callable[[dict[str, Any]], None] | None = None,
    customer_schedulable: bool = False,
    example: Mapping[str, Any] | None = None,
) -> Any:
    """Mark a Celery task as runnable by jobs (see the module's docstring). Put it above
    `@shared_task(name=...)`; it returns the task unchanged. `timeout`: one attempt's window
    (seconds); `max_failures`, `backoff_*`, `deadline`: the step's retry policy (StepDef);
    `validate(arguments)`: extra checks on the bound arguments (defaults filled in), raising
    WorkflowInputError. `customer_schedulable`: customers (not staff) may schedule it - default
    no, staff-only (`Workflow.customer_schedulable`). `example`: an input to show people
    (default: from the arguments' defaults)."""

    def mark(task: Task) -> Task:
        # shared_task returns a proxy; the task itself carries the name and the function.
        real: Task = task._get_current_object() if hasattr(task, "_get_current_object") else task
        parameters, extra_args, extra_kwargs, wants_key = _parameters(real)
        doc = inspect.getdoc(real.run) or ""
        spec = SchedulableTask(
            name=real.name,
            label=label or real.name,
            description=description or doc.split("\n\n", 1)[0].replace("\n", " "),
            task=real,
            parameters=parameters,
            extra_args=extra_args,
            extra_kwargs=extra_kwargs,
            wants_key=wants_key,
            transient=DEFAULT_TRANSIENT + tuple(retry_on) + tuple(getattr(real, "autoretry_for", ()) or ()),
            check=validate,
            customer_schedulable=customer_schedulable,
            example=example,
        )
        existing = _registry.get(spec.name)
        if existing is not None:
            raise ValueError(f"task {spec.name!r} is already schedulable")
        _registry[spec.name] = spec
        register(
            Workflow(
                name=spec.workflow,
                label=spec.label,
                description=spec.description,
                validate=spec.validate,
                input_schema=spec.input_schema(),
                input_example=spec.input_example(),
                customer_schedulable=spec.customer_schedulable,
                steps=[
                    StepDef(
                        name="run",
                        label=spec.label,
                        operation=TASK_OPERATION,
                        payload=_payload_builder(spec.name),
                        timeout=timeout,
                        max_failures=max_failures,
                        backoff_base=backoff_base,
                        backoff_max=backoff_max,
                        deadline=deadline,
                    )
                ],
            )
        )
        return task

    return mark(task) if task is not None else mark


def _payload_builder(name: str) -> Callable[[StepContext], dict[str, Any]]:
    def payload(ctx: StepContext) -> dict[str, Any]:
        return {"task": name, "args": ctx.input.get("args", []), "kwargs": ctx.input.get("kwargs", {})}

    return payload


def schedulable_get(name: str) -> SchedulableTask | None:
    return _registry.get(name)


def schedulable_all() -> list[SchedulableTask]:
    return [_registry[name] for name in sorted(_registry)]


# -- the agent ---------------------------------------------------------------------------------


class LocalTaskAgent(AgentTask):
    """Runs a schedulable task's function in this worker. No remote service, so no circuit
    breaker; one call per attempt, the step's policy retrying."""

    service = "tasks"
    retry_policy = RetryPolicy(max_tries=1)

    def breaker(self, payload: dict[str, Any]) -> NoBreaker:
        return NoBreaker()

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        spec = schedulable_get(str(payload.get("task")))
        if spec is None:
            raise PermanentFault(f"task {payload.get('task')!r} is not schedulable in this worker")
        return spec.call(
            args=payload.get("args", []), kwargs=payload.get("kwargs", {}), idempotency_key=idempotency_key
        )


@shared_task(name=TASK_OPERATION, bind=True, base=LocalTaskAgent)
def task_run_operation(self: LocalTaskAgent, **kwargs: Any) -> str:
    return self.perform(path="", **kwargs)

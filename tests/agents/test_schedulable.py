"""@schedulable: a task's arguments checked against its signature before anything is written,
and its function run by the `agents.tasks.run` agent (called in-process here, on the real
database and Redis; tests/e2e/test_job_targets_live.py runs it on a real worker)."""

from __future__ import annotations

from typing import Any

import pytest
from celery import shared_task
from django.db import transaction

from agents.schedulable import TASK_OPERATION, schedulable, schedulable_get, task_run_operation
from agents.selectors import schedulable_task_choices, schedulable_tasks
from scheduler.models import Run, Step
from scheduler.services import run_submit, step_claim_due
from scheduler.workflows import WorkflowInputError, get_workflow

CALLS: list[dict[str, Any]] = []


def _non_negative(arguments: dict[str, Any]) -> None:
    if arguments["a"] < 0:
        raise WorkflowInputError({"args": "a: must not be negative"})


@schedulable(label="Add (test)", timeout=5, validate=_non_negative)
@shared_task(name="tests.schedulable.add")
def add(a: int, b: int = 2, *, scale: float = 1.0, note: str | None = None) -> dict[str, Any]:
    """Add two numbers.

    More text that is not the description."""
    return {"sum": (a + b) * scale, "note": note}


@schedulable(timeout=5, max_failures=2, backoff_base=0.1, backoff_max=0.2)
@shared_task(name="tests.schedulable.flaky", bind=True)
def flaky(self: Any, mode: str = "ok", *, idempotency_key: str = "") -> Any:
    CALLS.append({"mode": mode, "key": idempotency_key, "request_id": self.request.id})
    if mode == "transient":
        raise ConnectionError("the thing is down, try later")
    if mode == "permanent":
        raise ValueError("this can never work")
    if mode == "object":
        return object()
    return {"key": idempotency_key}


@pytest.mark.parametrize(
    ("data", "cleaned"),
    [
        ({"args": [1]}, {"args": [1], "kwargs": {}}),
        (
            {"args": [1, 5], "kwargs": {"scale": 2, "note": None}},
            {"args": [1, 5], "kwargs": {"scale": 2, "note": None}},
        ),
        ({"kwargs": {"a": 1, "b": 3, "scale": 0.5}}, {"args": [], "kwargs": {"a": 1, "b": 3, "scale": 0.5}}),
    ],
)
def test_task_input__fits_the_signature__cleaned(data: dict[str, Any], cleaned: dict[str, Any]) -> None:
    assert get_workflow("task:tests.schedulable.add").validate(data) == cleaned


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({}, "kwargs", "a: missing required argument"),
        ({"args": [1, 2, 3]}, "args", "at most 2 positional"),
        ({"kwargs": {"a": 1, "zzz": 2}}, "kwargs", "zzz: unknown argument"),
        ({"args": [1], "kwargs": {"a": 2}}, "kwargs", "a: given both"),
        ({"args": ["1"]}, "args", "a: must be an integer"),
        ({"args": [True]}, "args", "a: must be an integer"),
        ({"kwargs": {"a": 1, "scale": "big"}}, "kwargs", "scale: must be a number"),
        ({"kwargs": {"a": 1, "scale": None}}, "kwargs", "scale: must not be null"),
        ({"kwargs": {"a": 1, "note": 5}}, "kwargs", "note: must be a string"),
        ({"args": "1"}, "args", "must be a list"),
        ({"kwargs": [1]}, "kwargs", "must be an object"),
        ({"args": [1], "queue": "x"}, "non_field_errors", "unknown field"),
        ({"args": [float("nan")]}, "non_field_errors", "JSON values"),
        ({"args": [object()]}, "non_field_errors", "JSON values"),
        ({"args": [1], "kwargs": {"note": "x" * 20_000}}, "non_field_errors", "at most"),
        ({"args": [-1]}, "args", "must not be negative"),  # the task's own `validate`
    ],
)
def test_task_input__against_the_signature__field_error(
    data: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(WorkflowInputError) as caught:
        get_workflow("task:tests.schedulable.add").validate(data)

    assert any(message in text for text in caught.value.errors.get(field, [])), caught.value.errors


def test_task_input__idempotency_key__is_the_engines_not_the_users() -> None:
    with pytest.raises(WorkflowInputError) as caught:
        get_workflow("task:tests.schedulable.flaky").validate({"kwargs": {"idempotency_key": "mine"}})

    assert caught.value.errors == {"kwargs": ["idempotency_key: set by the engine"]}


def test_schedulable__workflow__one_step_on_the_tasks_agent_with_the_declared_policy() -> None:
    workflow = get_workflow("task:tests.schedulable.add")

    (step,) = workflow.steps
    assert (step.name, step.operation, step.timeout, step.label) == ("run", TASK_OPERATION, 5, "Add (test)")
    assert workflow.description == "Add two numbers."
    assert workflow.input_schema["properties"]["kwargs"]["properties"]["scale"] == {
        "type": "number",
        "default": 1.0,
    }
    assert get_workflow("task:tests.schedulable.flaky").steps[0].max_failures == 2


def test_schedulable__marking_twice__refused() -> None:
    with pytest.raises(ValueError, match="already schedulable"):
        schedulable(add)


def test_selector__lists_marked_tasks_for_forms() -> None:
    tasks = {t["name"]: t for t in schedulable_tasks()}

    assert tasks["tests.schedulable.add"]["workflow"] == "task:tests.schedulable.add"
    assert [p["name"] for p in tasks["tests.schedulable.add"]["parameters"]] == ["a", "b", "scale", "note"]
    assert [p["name"] for p in tasks["tests.schedulable.flaky"]["parameters"]] == ["mode"]
    # The project's own: the webhook outbox's retention.
    assert tasks["webhooks.purge_deliveries"]["label"] == "Purge old webhook deliveries"
    assert ("task:webhooks.purge_deliveries", "Purge old webhook deliveries") in schedulable_task_choices()


# -- run by the agent, in-process --------------------------------------------------------------


def _run_claimed(user: Any, mode: str) -> tuple[Run, Any]:
    run = run_submit(
        workflow="task:tests.schedulable.flaky", input={"args": [mode]}, owner_id=user.id, kick=False
    )
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return run, claim


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    CALLS.clear()
    return CALLS


def test_agent__task_succeeds__step_processed_with_its_result(
    engine: Any, demo_user: Any, calls: list
) -> None:
    run, claim = _run_claimed(demo_user, "ok")

    outcome = task_run_operation.perform(path="", **claim.message())

    step = Step.objects.get(pk=claim.step_id)
    assert outcome == "accepted"
    assert step.process_state == Step.State.PROCESSED
    assert step.result == {"key": step.idempotency_key} and step.idempotency_key == f"{run.id}:run"
    assert calls == [{"mode": "ok", "key": step.idempotency_key, "request_id": calls[0]["request_id"]}]
    assert Run.objects.get(pk=run.id).state == Run.State.COMPLETED


def test_agent__transient_exception__step_retried_later(engine: Any, demo_user: Any, calls: list) -> None:
    _, claim = _run_claimed(demo_user, "transient")

    task_run_operation.perform(path="", **claim.message())

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == Step.State.PENDING and step.failure_count == 1
    assert "ConnectionError: the thing is down" in step.last_error
    assert len(calls) == 1  # one call per attempt: the step's backoff does the retrying


def test_agent__other_exception__permanent_step_error(engine: Any, demo_user: Any, calls: list) -> None:
    run, claim = _run_claimed(demo_user, "permanent")

    task_run_operation.perform(path="", **claim.message())

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == Step.State.ERROR and step.error_permanent
    assert "ValueError: this can never work" in step.last_error
    assert Run.objects.get(pk=run.id).state in (Run.State.COMPENSATED, Run.State.COMPENSATING)


def test_agent__result_not_json__stored_as_text(engine: Any, demo_user: Any, calls: list) -> None:
    _, claim = _run_claimed(demo_user, "object")

    task_run_operation.perform(path="", **claim.message())

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == Step.State.PROCESSED and step.result.startswith("<object object")


def test_agent__task_unknown_to_this_worker__permanent(engine: Any, demo_user: Any) -> None:
    _, claim = _run_claimed(demo_user, "ok")
    # The agent acts on the step's stored payload (issue 26), so that is where the task is gone.
    Step.objects.filter(pk=claim.step_id).update(payload={"task": "nope.gone", "args": [], "kwargs": {}})

    task_run_operation.perform(path="", **claim.message())

    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == Step.State.ERROR and "not schedulable" in step.last_error
    assert schedulable_get("nope.gone") is None

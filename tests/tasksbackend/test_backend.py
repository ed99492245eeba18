"""The backend of Django's task framework on the engine (tasksbackend/, issue 31 item 4), in the
database-only tier: enqueue's rows and refusals, the results' mapping (through the harness on a
virtual clock: the real transitions and the agent's body, in-process), who may read a result,
and what the agent refuses to run. The same on real workers: test_backend_live.py."""

from __future__ import annotations

import sys
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django_tasks import TaskResultStatus, default_task_backend
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from rest_framework.test import APIClient

from agents.faults import PermanentFault
from scheduler.models import Run, Step
from scheduler.services import run_submit
from scheduler.workflows import WorkflowInputError, get_workflow
from tasksbackend.agent import DjangoTaskAgent
from tasksbackend.backend import tasks_owner
from tasksbackend.results import task_result_for_owner

from . import tasks

pytestmark = pytest.mark.django_db


def test_enqueue__writes_one_run_with_the_tasks_priority_and_owner(django_user_model):
    alice = django_user_model.objects.create_user("alice-t")
    with tasks_owner(alice):
        result = tasks.add.using(priority=7).enqueue(2, b=3)

    run = Run.objects.get(pk=result.id)
    assert run.workflow == "djtask:default:default:tests.tasksbackend.tasks.add"
    assert run.input == {"args": [2], "kwargs": {"b": 3}}
    assert (run.priority, run.owner_id) == (7, alice.pk)
    (step,) = Step.objects.filter(run=run)
    assert step.operation == "agents.tasks.django_task"
    assert step.payload["task"] == "tests.tasksbackend.tasks.add"
    assert result.status == TaskResultStatus.READY
    assert default_task_backend.get_result(result.id).status in (
        TaskResultStatus.READY,
        TaskResultStatus.RUNNING,
    )


def test_enqueue__unknown_queue__refused_and_nothing_written():
    with pytest.raises(InvalidTaskError, match="Queue 'nowhere' is not valid"):
        tasks.add.using(queue_name="nowhere").enqueue(1, 2)
    assert not Run.objects.exists()


def test_enqueue__arguments_not_json__refused_and_nothing_written():
    with pytest.raises(InvalidTaskError, match="arguments must be JSON values"):
        tasks.add.enqueue(object(), 2)  # type: ignore[arg-type]
    assert not Run.objects.exists()


def test_enqueue__run_after__is_the_first_steps_not_before(harness):
    later = harness.clock.now() + timedelta(seconds=30)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    (step,) = Step.objects.filter(run_id=result.id)
    assert step.process_state == Step.State.PENDING
    assert step.not_before == later

    harness.settle(until=later - timedelta(seconds=1))
    assert default_task_backend.get_result(result.id).status == TaskResultStatus.READY
    harness.settle()
    done = default_task_backend.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.started_at is not None and done.started_at >= later


def test_enqueue__inside_a_rolled_back_transaction__leaves_no_task():
    enqueued = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            enqueued.append(tasks.add.enqueue(1, 2))
            raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    (result,) = enqueued
    assert not Run.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(result.id)


def test_result__success__status_and_return_value(harness):
    result = tasks.add.enqueue(2, 40)
    harness.settle()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"sum": 42}
    assert result.attempts == 1 and result.errors == []
    assert result.finished_at is not None and result.enqueued_at <= result.started_at <= result.finished_at
    assert tasks.add.get_result(result.id).return_value == {"sum": 42}


def test_result__function_raises__failed_with_its_exception(harness):
    result = tasks.explode.enqueue("boom")
    harness.settle()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert "boom" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_result__transient_error__retried_then_successful(harness, tmp_path):
    marker = tmp_path / "flaky"
    result = tasks.flaky.enqueue(str(marker))
    harness.settle()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "ok on attempt 2"
    assert result.attempts == 2
    (error,) = result.errors
    assert error.exception_class is ConnectionError
    assert marker.read_text() == "attempt 1\nattempt 2\n"


def test_get_result__not_a_tasks_run_or_not_an_id__does_not_exist(django_user_model):
    other = run_submit(workflow="task:webhooks.purge_deliveries", input={"kwargs": {}})
    for result_id in (str(other.id), "not-a-uuid", str(uuid.uuid4())):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)


def test_result_for_owner__another_customers_result__does_not_exist(django_user_model):
    alice = django_user_model.objects.create_user("alice-r")
    bob = django_user_model.objects.create_user("bob-r")
    with tasks_owner(alice):
        result = tasks.add.enqueue(1, 1)

    assert task_result_for_owner(user=alice, result_id=result.id).id == result.id
    with pytest.raises(TaskResultDoesNotExist):
        task_result_for_owner(user=bob, result_id=result.id)
    # The platform's API answers the owner only (404 for another, never 403).
    client = APIClient()
    client.force_authenticate(bob)
    assert client.get(f"/api/runs/{result.id}/progress/").status_code == 404
    client.force_authenticate(alice)
    assert client.get(f"/api/runs/{result.id}/progress/").status_code == 200


def test_tasks_workflow__is_nobodys_job_target_and_unregistered_paths_are_unknown():
    tasks.add.enqueue(1, 1)
    assert get_workflow("djtask:default:default:tests.tasksbackend.tasks.add").job_target is False
    with pytest.raises(WorkflowInputError, match="unknown workflow"):
        run_submit(workflow="djtask:default:default:os.system", input={"args": ["true"]})
    assert Run.objects.count() == 1


def test_agent__a_path_never_registered__refused_without_importing_it():
    missing = "tests.tasksbackend.never_imported"
    assert missing not in sys.modules
    agent = DjangoTaskAgent()
    with pytest.raises(PermanentFault, match="not registered in this worker"):
        agent.call_remote(
            path="",
            payload={"task": f"{missing}.run", "args": [], "kwargs": {}},
            idempotency_key="k",
            timeout=5,
        )
    with pytest.raises(PermanentFault, match="not registered"):
        agent.call_remote(
            path="",
            payload={"task": "os.system", "args": ["true"], "kwargs": {}},
            idempotency_key="k",
            timeout=5,
        )
    assert missing not in sys.modules


def test_task__policy_from_the_decorator_is_the_steps():
    result = tasks.slow_write.enqueue("/nonexistent", 0)
    (step,) = Step.objects.filter(run_id=result.id)
    assert step.timeout == timedelta(seconds=3)
    assert (step.backoff_base, step.backoff_max, step.max_failures) == (0.2, 0.5, 3)


def test_enqueue__the_users_pk_is_not_needed(django_user_model):
    # No owner: operator's work; nobody's result through the owner-scoped selector.
    result = tasks.add.enqueue(1, 2)
    assert Run.objects.get(pk=result.id).owner_id is None
    with pytest.raises(TaskResultDoesNotExist):
        task_result_for_owner(user=get_user_model()(pk=1), result_id=result.id)
    assert timezone.now() >= result.enqueued_at

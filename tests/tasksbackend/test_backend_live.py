"""Django's task framework on the engine's real processes (tasksbackend/, issue 31 item 4): a
plain `@task` enqueued through the framework runs on the session's agent worker, on Redis and
on RabbitMQ, and its result comes back through the framework's API. The functions are
tests/tasksbackend/tasks.py, which the workers import at start-up."""

from __future__ import annotations

import signal
import time
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django_tasks import TaskResult, TaskResultStatus

from sastools.harness import wait_for
from scheduler.models import TaskExecutionHistory

from . import tasks

pytestmark = pytest.mark.both_brokers


def _finished(result: TaskResult, timeout: float = 30.0) -> TaskResult:
    def check() -> bool:
        result.refresh()
        return result.is_finished

    wait_for(check, timeout=timeout, interval=0.1, what=f"task {result.id} to finish")
    return result


def test_enqueue__runs_on_the_agent_worker__result_read_back(engine):
    result = tasks.add.enqueue(20, b=22)
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"sum": 42}
    assert result.attempts == 1
    assert tasks.add.get_result(result.id).return_value == {"sum": 42}
    assert "agents.tasks.django_task[" in engine.agents.log()


def test_function_raises__failed_with_the_error(engine):
    result = _finished(tasks.explode.enqueue("no such thing"))
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is ValueError
    assert "no such thing" in error.traceback


def test_transient_error__retried_by_the_engine_then_successful(engine, tmp_path):
    marker = tmp_path / "flaky"
    result = _finished(tasks.flaky.enqueue(str(marker)))
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "ok on attempt 2"
    assert [e.exception_class for e in result.errors] == [ConnectionError]
    assert marker.read_text() == "attempt 1\nattempt 2\n"


def test_run_after__not_started_before_it(engine):
    later = timezone.now() + timedelta(seconds=3)
    result = tasks.add.using(run_after=later).enqueue(1, 1)
    time.sleep(1.5)
    result.refresh()
    assert result.status == TaskResultStatus.READY and result.started_at is None
    _finished(result)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at is not None and result.started_at >= later


def test_enqueue_in_a_transaction__runs_after_the_commit_and_sees_its_rows(engine):
    name = f"u-{uuid.uuid4().hex[:8]}"
    with transaction.atomic():
        get_user_model().objects.create_user(name)
        result = tasks.user_exists.enqueue(name)
        time.sleep(1.0)  # a worker that started the task now could not see the user
    assert _finished(result).return_value is True


def test_agent_worker_killed_mid_task__completes_once(engine, tmp_path):
    marker = tmp_path / "slow"
    result = tasks.slow_write.enqueue(str(marker), 1.5)
    wait_for(
        lambda: marker.exists() and "started" in marker.read_text(), timeout=15, what="the task to start"
    )
    engine.agents.kill(signal.SIGKILL)  # parent and pool children, no goodbye
    engine.agents.start(ready_marker=" ready.")

    _finished(result, timeout=40)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "written"
    # The first run of the function died mid-sleep and the function ran again to the end: one
    # completion. Who sent it again depends on the broker: on Redis the killed worker's message
    # waits out the visibility timeout, so the supervisor takes the step back after its window
    # (attempt 1 timed out, attempt 2 succeeded); RabbitMQ redelivers an unacknowledged message
    # as soon as the connection drops, and the restarted worker runs the same attempt (same
    # lease) inside its window (docs/design.md, "A killed worker").
    text = marker.read_text()
    assert (text.count("started"), text.count("done")) == (2, 1), text
    statuses = list(
        TaskExecutionHistory.objects.filter(run_id=result.id, kind="attempt")
        .order_by("started_at", "id")
        .values_list("status", flat=True)
    )
    if engine.broker == "redis":
        assert statuses == ["timed_out", "succeeded"]
        assert [e.exception_class_path for e in result.errors] == ["tasksbackend.errors.TaskTimedOut"]
    else:
        assert statuses in (["succeeded"], ["timed_out", "succeeded"])

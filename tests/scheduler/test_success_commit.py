"""An intermediate step's success commits without waiting for the WAL flush; a run's end, an
observed run's success and a database that asks for it (`sas.durable_steps`) wait (issue 27;
docs/decisions.md, "An intermediate step's success commits without waiting for the WAL flush").

sas_step_succeed decides it with `SET LOCAL synchronous_commit`: read back in the same
transaction, before the commit it governs."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.db import connection, transaction

from agents.http_call import HTTP_CALL_WORKFLOW
from scheduler import transitions
from scheduler.services import RunSpec, runs_submit_many, step_claim_due
from scheduler.workflows import get_workflow
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _submit(owner: Any, workflow: str, data: dict[str, Any]) -> None:
    definition = get_workflow(workflow)
    runs_submit_many(
        [RunSpec(definition=definition, input=definition.validate(data), owner_id=owner.id)], kick=False
    )


def _succeed_first_claimed(*, durable_steps: str | None = None) -> tuple[str, bool]:
    """Claim the one due step, accept its success, and read `synchronous_commit` in the same
    transaction. Returns (the setting, whether the run ended)."""
    with transaction.atomic():
        if durable_steps is not None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('sas.durable_steps', %s, true)", [durable_steps])
        (claim,) = step_claim_due(instance="test", limit=10)
        done = transitions.step_succeed(
            step_id=claim.step_id,
            lease=claim.lease,
            result={"ok": True},
            instance="test",
            claim_next=False,
            observed_ok=True,
        )
        assert done.accepted
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            (setting,) = cursor.fetchone()
            cursor.execute("SELECT state FROM scheduler_run WHERE id = %s", [done.run_id])
            (state,) = cursor.fetchone()
    return setting, state == "completed"


def test_success__the_run_goes_on__commits_without_waiting_for_the_flush(django_user_model):
    _submit(django_user_model.objects.create(username="c1"), ENGINE_WORKFLOW, ENGINE_INPUT)

    assert _succeed_first_claimed() == ("off", False)


def test_success__the_runs_last_step__waits_for_the_flush(django_user_model):
    url = f"{os.environ['SIMULATOR_URL']}/echo"
    _submit(
        django_user_model.objects.create(username="c2"), HTTP_CALL_WORKFLOW, {"method": "POST", "url": url}
    )

    assert _succeed_first_claimed() == ("on", True)


def test_success__sas_durable_steps_on__every_success_waits(django_user_model):
    _submit(django_user_model.objects.create(username="c3"), ENGINE_WORKFLOW, ENGINE_INPUT)

    assert _succeed_first_claimed(durable_steps="on") == ("on", False)

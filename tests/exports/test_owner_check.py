"""The export agent writes an export only for the owner of the run that names it (issue 18,
defence in depth: `exports.history_csv` is staff-only work, so no customer's job names one).
In-process on the real database: the test claims the step and calls the agent's code."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from exports.models import Export, ExportFile
from exports.services import export_request
from exports.tasks import history_csv
from scheduler.models import Run, Step
from scheduler.services import run_submit, step_claim_due

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


@pytest.fixture(autouse=True)
def _quick_exports(settings: Any) -> None:
    settings.SAS = {**settings.SAS, "EXPORT_MIN_SECONDS": 0.0}


def _work(run: Run) -> str:
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return str(history_csv.perform_long(**claim.message()))


def test_export_agent__another_owners_export__refused_for_good_nothing_written(
    django_user_model: Any,
) -> None:
    victim = django_user_model.objects.create(username="victim")
    ops = django_user_model.objects.create(username="ops", is_staff=True)
    theirs = Export.objects.create(owner=victim)
    # A run of the staff user naming the victim's export (as a job of it would start).
    run = run_submit(
        workflow="exports.history_csv", input={"export_id": str(theirs.pk)}, owner_id=ops.pk, kick=False
    )

    _work(run)

    step = Step.objects.get(run=run)
    assert step.process_state == "error", step.process_state
    assert "is not the run owner's" in step.last_error
    theirs.refresh_from_db()
    assert theirs.completed_at is None and not ExportFile.objects.exists()


def test_export_agent__own_export__written(django_user_model: Any) -> None:
    owner = django_user_model.objects.create(username="owner")
    export = export_request(owner_id=owner.pk)
    assert export.run is not None

    _work(export.run)

    export.refresh_from_db()
    assert export.completed_at is not None and ExportFile.objects.filter(export=export).exists()

"""A reply for a step that does not exist (forged, or its run deleted since) is logged and
dropped: nothing written, no exception out of the reply service (issue 26: `step_succeed` and
the other transitions read the functions' NULL answer as a row and raised)."""

from __future__ import annotations

import logging
import uuid

import pytest

from scheduler.models import Run, Step, TaskExecutionHistory
from scheduler.services import step_heartbeat, step_reply

pytestmark = pytest.mark.django_db

UNKNOWN = 987_654_321


@pytest.mark.parametrize("outcome", ["success", "continue", "permanent", "transient", "deferred"])
def test_reply__unknown_step__ignored_and_logged(outcome, caplog):
    caplog.set_level(logging.INFO)
    lease = str(uuid.uuid4())

    assert step_reply(step_id=UNKNOWN, lease=lease, outcome=outcome, error="forged") == "ignored"

    assert not Step.objects.exists() and not Run.objects.exists()
    assert not TaskExecutionHistory.objects.exists()
    assert f"reply for step {UNKNOWN} dropped: no such step ({outcome}" in caplog.text


def test_heartbeat__unknown_step__not_extended():
    beat = step_heartbeat(step_id=UNKNOWN, lease=str(uuid.uuid4()), worker="w")

    assert beat.extended is False
    assert not TaskExecutionHistory.objects.exists()

"""The customer's order page groups repeated attempts (issue 21): after a one-minute outage a
completed order shows "The payment service was not available at that moment. 17:14-17:15, 18
tries", one line, not 18 identical ones."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from orders.selectors import Attempt, attempt_groups
from scheduler.models import Run, Step, TaskExecutionHistory
from tests.admin.factories import claim, order_pending, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

UNAVAILABLE = "The payment service was not available at that moment."


def _attempt(n: int, at: datetime, reason: str, status: str = "deferred") -> Attempt:
    return Attempt(
        number=n,
        status=status,
        status_label=status,
        started_at=at,
        ended_at=at + timedelta(seconds=1),
        error="x" if reason else "",
        reason=reason,
    )


def test_attempt_groups__runs_of_the_same_reason_are_one_line__a_success_or_another_reason_splits() -> None:
    t0 = datetime(2026, 11, 25, 17, 14, 5, tzinfo=UTC)
    attempts = [_attempt(i + 1, t0 + timedelta(seconds=4 * i), UNAVAILABLE) for i in range(18)]
    attempts.append(_attempt(19, t0 + timedelta(seconds=80), "Your card was declined.", "failed_permanent"))

    groups = attempt_groups(attempts)

    assert [(g["label"], g["tries"], g["when"]) for g in groups] == [
        ("Attempts 1\u201318", 18, "17:14\u201317:15, 18 tries"),
        ("Attempt 19", 1, ""),
    ]
    assert groups[0]["status"] == "deferred" and groups[1]["status"] == "failed_permanent"
    # Within one minute the times are to the second; a success in between splits the groups.
    short = [_attempt(1, t0, UNAVAILABLE), _attempt(2, t0 + timedelta(seconds=2), UNAVAILABLE)]
    ok = _attempt(3, t0 + timedelta(seconds=4), "", "succeeded")
    again = _attempt(4, t0 + timedelta(seconds=6), UNAVAILABLE)
    split = attempt_groups([*short, ok, again])
    assert [(g["tries"], g["when"]) for g in split] == [(2, "17:14:05\u201317:14:08, 2 tries"), (1, "")]


def test_order_page__an_outage_of_18_deferred_tries_then_success__one_grouped_line(
    client: Client, django_user_model: Any
) -> None:
    customer = django_user_model.objects.create_user("outage-customer")
    order = order_pending(customer)
    reply(claim(order.run_id), "success")
    for _ in range(18):  # the breaker is open: each try is deferred, no failure counted
        c = claim_when_due(order.run_id)
        reply(c, "deferred", error="circuit open for payment (retry in 0.0s)")
    reply(claim_when_due(order.run_id), "success")
    reply(claim(order.run_id), "success")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPLETED
    charge = Step.objects.get(run_id=order.run_id, name="charge_payment")
    assert TaskExecutionHistory.objects.filter(step=charge, kind="attempt", status="deferred").count() == 18
    client.force_login(customer)

    response = client.get(f"/orders/{order.pk}/")
    html = response.content.decode()
    status = client.get(f"/orders/{order.pk}/status/").json()

    row = html[html.index('data-step="charge_payment"') :]
    row = row[: row.index("</tr>")]
    assert row.count("<li ") == 1, row
    assert 'data-tries="18"' in row and UNAVAILABLE in row and ", 18 tries" in row
    charge_json = next(s for s in status["steps"] if s["name"] == "charge_payment")
    assert [g["tries"] for g in charge_json["attempt_groups"]] == [18]
    assert len(charge_json["attempt_history"]) == 19  # every attempt is still in the data
    # The timeline too: one bar for the 18 deferred tries (no waits drawn inside it), the wait
    # after the last of them, one bar for the success.
    timeline = response.context["timeline"]
    lane = next(i for i, lane in enumerate(timeline.lanes) if lane.name == "charge_payment")
    bars = [s for s in timeline.spans if s.lane == lane and s.kind in ("attempt", "wait")]
    assert [(s.kind, s.status) for s in bars] == [
        ("attempt", "deferred"),
        ("wait", "wait"),
        ("attempt", "succeeded"),
    ]
    assert "attempts 1\u201318" in bars[0].title and "18 tries" in bars[0].title
    assert UNAVAILABLE in bars[0].title


def claim_when_due(run_id: Any) -> Any:
    """Claim the run's next step once its short deferral (at most 0.1 s of jitter) has passed."""
    for _ in range(50):
        try:
            return claim(run_id)
        except AssertionError:
            time.sleep(0.03)
    raise AssertionError("the step never became due")

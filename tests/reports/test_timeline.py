"""A run's timeline from a hand-built history: every attempt a bar in its step's lane, waits
before retries, supervisor recoveries, give-ups, ignored replies and operator actions as marks;
what the order page shows (customer reasons) and what the admin shows (raw errors)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from orders.models import Order
from reports.timeline import run_timeline
from reports.timeline_chart import timeline_chart
from scheduler.models import RunEvent, TaskExecutionHistory

from .history import at, attempt, decision, make_run, make_step, make_user

pytestmark = pytest.mark.django_db
H = TaskExecutionHistory
NASTY = "<script>alert(1)</script>"


@pytest.fixture
def run_with_history() -> Any:
    owner = make_user("tl")
    run = make_run(owner, created=at("01-05 10:00:00"), state="compensated", seconds=12)
    reserve = make_step(run, "reserve_inventory", seq=0, state="compensated")
    charge = make_step(run, "charge_payment", seq=1, state="error")
    release = make_step(run, "release_inventory", kind="compensation", seq=1000, state="processed")

    lost = attempt(reserve, 1, H.Status.TIMED_OUT, at("01-05 10:00:00.050"), 2, worker=NASTY)
    decision(reserve, kind=H.Kind.SUPERVISOR, status=H.Status.RETRY_SCHEDULED, cause="timed_out",
             when=at("01-05 10:00:02.100"), failed=lost, backoff=0.5)  # fmt: skip
    attempt(reserve, 2, H.Status.SUCCEEDED, at("01-05 10:00:02.700"), 0.3)
    H.objects.create(step=reserve, run=run, kind=H.Kind.LATE_REPLY, status=H.Status.IGNORED,
                     worker="late-agent:9",
                     detail={"outcome": "success"}, started_at=at("01-05 10:00:03.200"),
                     ended_at=at("01-05 10:00:03.200"))  # fmt: skip

    deferred = attempt(charge, 1, H.Status.DEFERRED, at("01-05 10:00:03.100"), 0.01, error="breaker open")
    decision(charge, kind=H.Kind.SCHEDULER, status=H.Status.RETRY_SCHEDULED, cause="deferred",
             when=at("01-05 10:00:03.110"), failed=deferred, backoff=2)  # fmt: skip
    refused = attempt(charge, 2, H.Status.FAILED_PERMANENT, at("01-05 10:00:05.200"), 0.4,
                      error='payment refused (402): {"error":"card_declined"}')  # fmt: skip
    decision(charge, kind=H.Kind.SCHEDULER, status=H.Status.ERRORED, cause="failed_transient",
             when=at("01-05 10:00:05.600"), failed=refused)  # fmt: skip
    attempt(release, 1, H.Status.SUCCEEDED, at("01-05 10:00:06"), 0.5)
    H.objects.create(step=release, run=run, kind=H.Kind.OPERATOR, status=H.Status.ACTION, worker="ops-anna",
                     error="checked by phone", detail={"action": "mark_done"},
                     started_at=at("01-05 10:00:11"), ended_at=at("01-05 10:00:11"))  # fmt: skip
    for kind in (RunEvent.Type.RECEIVED, RunEvent.Type.STARTED, RunEvent.Type.COMPENSATED):
        RunEvent.objects.create(run=run, type=kind)
    RunEvent.objects.filter(run=run).update(created_at=at("01-05 10:00:00"))
    return run


def test_timeline__lanes_bars_waits_and_marks(run_with_history: Any) -> None:
    run = run_with_history
    timeline = run_timeline(run=run, now=at("01-05 12:00:00"))

    assert [lane.name or "run" for lane in timeline.lanes] == [
        "run", "reserve_inventory", "charge_payment", "release_inventory",
    ]  # fmt: skip
    assert timeline.lanes[3].label.startswith("\u21ba")  # a compensation
    attempts = [(timeline.lanes[s.lane].name, s.status) for s in timeline.spans if s.kind == "attempt"]
    assert attempts == [
        ("reserve_inventory", "timed_out"),
        ("reserve_inventory", "succeeded"),
        ("charge_payment", "deferred"),
        ("charge_payment", "failed_permanent"),
        ("release_inventory", "succeeded"),
    ]
    waits = [s for s in timeline.spans if s.kind == "wait"]
    # Each wait runs from the decision to the next attempt's start.
    assert [(w.start, w.end) for w in waits] == [
        (at("01-05 10:00:02.100"), at("01-05 10:00:02.700")),
        (at("01-05 10:00:03.110"), at("01-05 10:00:05.200")),
    ]
    assert "not counted as a failure" in waits[1].title  # a deferral
    marks = sorted((m.kind, timeline.lanes[m.lane].name or "run") for m in timeline.marks)
    assert marks == [
        ("errored", "charge_payment"),
        ("event", "run"), ("event", "run"), ("event", "run"),
        ("late_reply", "reserve_inventory"),
        ("operator", "release_inventory"),
        ("supervisor", "reserve_inventory"),
    ]  # fmt: skip
    run_bar = timeline.spans[0]
    assert (run_bar.kind, run_bar.status, run_bar.end) == ("run", "compensated", run.finished_at)
    assert timeline.end == run.finished_at  # the last thing that happened (the operator at 11 s)
    assert "reply from agent-host:202" in timeline.spans[1].title  # the supervisor's recovery named


def test_timeline_chart__hover_titles_escaped__one_bar_per_attempt(run_with_history: Any) -> None:
    svg = str(timeline_chart(run_timeline(run=run_with_history, now=at("01-05 12:00:00"))))

    assert svg.count('data-kind="attempt"') == 5 and svg.count('data-kind="wait"') == 2
    assert NASTY not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg  # worker, escaped
    assert "card_declined" in svg  # the admin's view: raw errors
    assert svg.count("<title>") >= 5 + 2 + 7 + 4  # attempts, waits, marks, lane labels
    assert ">0 s</text>" in svg and ">12 s</text>" in svg  # axis from submit to the end


def test_timeline__order_page__customer_reasons_not_raw_errors(run_with_history: Any) -> None:
    run = run_with_history
    order = Order.objects.create(
        owner=run.owner, run=run, items=[{"sku": "SKU-1", "quantity": 1}], amount="1.00", currency="EUR"
    )
    client = Client()
    client.force_login(run.owner)
    page = client.get(f"/orders/{order.pk}/").content.decode()
    fragment = client.get(f"/orders/{order.pk}/timeline/")

    assert 'id="timeline"' in page and f'data-url="/orders/{order.pk}/timeline/"' in page
    assert page.count('data-kind="attempt"') == 5
    titles = " ".join(re.findall(r"<title>(.*?)</title>", page, flags=re.S))  # the hover texts
    assert "card_declined" not in page and "402" not in titles
    timeline = page.split('id="timeline"', 1)[1].split("</section>", 1)[0]
    assert "Your card was declined, so no money was taken." in timeline  # the reason, on hover
    assert fragment.status_code == 200 and fragment.content.decode().count('data-kind="attempt"') == 5
    other = Client()
    other.force_login(make_user("other"))
    assert other.get(f"/orders/{order.pk}/timeline/").status_code == 404


def test_timeline__admin_run_page__raw_errors(run_with_history: Any) -> None:
    staff = make_user("admin")
    staff.is_staff = staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    page = client.get(f"/admin/scheduler/run/{run_with_history.pk}/change/")
    html = page.content.decode()

    assert page.status_code == 200
    assert 'class="chart chart-timeline"' in html and html.count('data-kind="attempt"') == 5
    assert "card_declined" in html  # operators read what the service said


def test_timeline__running_attempt__open_bar_until_now() -> None:
    run = make_run(make_user("tl"), created=at("01-05 10:00:00"), state="running")
    step = make_step(run, state="pending")
    attempt(step, 1, H.Status.STARTED, at("01-05 10:00:01"), None)
    now = at("01-05 10:00:04")
    timeline = run_timeline(run=run, now=now)

    bar = next(s for s in timeline.spans if s.kind == "attempt")
    assert bar.open and bar.end == now and timeline.end == now
    assert timeline.spans[0].open and timeline.spans[0].end == now
    assert timeline.end - timeline.start == timedelta(seconds=4)

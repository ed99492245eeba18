"""The soak's checker (soak/check.py) catches what it is for: facts shaped like a real soak's
pass, and each planted violation - a doubled remote effect, an undo done twice or never, a
completed order missing its shipment, a lost or doubled cron occurrence, a page applied twice,
an attempt missing from the history, an incident alerted twice or left open - fails its
invariant, and only its own."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta

import pytest

from soak import check

T0 = datetime(2026, 11, 26, 1, 0, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def expand(job, first, last):
    """Every minute (the soak's cron), both ends included."""
    t = first.replace(second=0, microsecond=0)
    if t < first:
        t += MINUTE
    out = []
    while t <= last:
        out.append(t)
        t += MINUTE
    return out


def entry(seq, service, operation, key, **payload):
    return {"seq": seq, "service": service, "operation": operation, "key": key, "effect_id": f"e{seq}",
            "payload": payload}  # fmt: skip


def healthy() -> check.Facts:
    """A completed order, a declined one compensated (its reservation released once), a job with
    three occurrences (two runs, one skipped by a misfire row), a reprice in two pages, one
    incident alerted and resolved."""
    f = check.Facts()
    f.runs = [
        {"id": "A", "workflow": "order_fulfilment", "state": "completed", "job_id": None,
         "scheduled_for": None, "job_attempt": 0},
        {"id": "B", "workflow": "order_fulfilment", "state": "compensated", "job_id": 7, "scheduled_for": T0,
         "job_attempt": 0},
        {"id": "C", "workflow": "order_fulfilment", "state": "completed", "job_id": 7,
         "scheduled_for": T0 + 2 * MINUTE, "job_attempt": 0},
        {"id": "R", "workflow": "catalogue.reprice", "state": "completed", "job_id": None,
         "scheduled_for": None, "job_attempt": 0},
    ]  # fmt: skip
    f.steps = [
        {"id": 1, "run_id": "A", "name": "reserve_inventory", "kind": "forward", "process_state": "processed",
         "attempts": 2},
        {"id": 2, "run_id": "B", "name": "charge_payment", "kind": "forward", "process_state": "error",
         "attempts": 1, "error_permanent": False},
        {"id": 3, "run_id": "E", "name": "charge_payment", "kind": "forward", "process_state": "error",
         "attempts": 0, "error_permanent": True},  # a declined card: a business outcome, no alert
    ]  # fmt: skip
    f.attempts = [(1, 1, "timed_out", True), (1, 2, "succeeded", True), (2, 1, "failed_permanent", True)]
    f.ledger = [
        entry(1, "inventory", "reserve", "A:reserve_inventory"),
        entry(2, "payment", "charge", "A:charge_payment"),
        entry(3, "shipping", "create", "A:create_shipment"),
        entry(4, "inventory", "reserve", "B:reserve_inventory"),
        entry(5, "inventory", "release", "B:release_inventory", reservation_key="B:reserve_inventory"),
        entry(6, "inventory", "reserve", "C:reserve_inventory"),
        entry(7, "payment", "charge", "C:charge_payment"),
        entry(8, "shipping", "create", "C:create_shipment"),
    ]
    f.jobs = [{"id": 7, "cron": "* * * * *", "timezone": "UTC", "created_at": T0 - timedelta(seconds=30)}]
    f.occurrences = check.window_occurrences(expand, f.jobs, T0 + 2 * MINUTE)
    f.skips = [(7, T0 + MINUTE, {"reason": "misfire", "first": (T0 + MINUTE).isoformat(),
                                 "last": (T0 + MINUTE).isoformat(), "count": 1})]  # fmt: skip
    f.pages = [("R", 0, 500, 500), ("R", 500, 800, 300)]
    f.products = 800
    f.alerts = [
        {"id": 1, "kind": "step_error", "key": "1:charge_payment", "state": "firing", "created_at": T0,
         "resolved_at": None, "run_ids": ["B"]},
        {"id": 2, "kind": "periodic_not_run", "key": "9:sweep", "state": "resolved", "created_at": T0,
         "resolved_at": T0 + MINUTE, "run_ids": []},
    ]  # fmt: skip
    return f


def failing(f: check.Facts) -> dict[str, list[str]]:
    return {inv.name: inv.violations for inv in check.check_all(f, expand) if not inv.ok}


def test_healthy_facts__every_invariant_holds_and_counts_what_it_checked():
    results = check.check_all(healthy(), expand)
    assert [inv.name for inv in results if not inv.ok] == []
    counts = {inv.name: inv.checked for inv in results}
    assert counts["every cron occurrence in the window: one run or one skip row"] == 3
    assert counts["every completed order: one reservation, payment and shipment"] == 2
    assert counts["every attempt in the history"] == 3


def plant_doubled_effect(f):
    f.ledger.append(dict(f.ledger[3], seq=99))  # the compensated order's reservation


def plant_undone_twice(f):
    f.ledger.append(entry(98, "inventory", "release", "B:again", reservation_key="B:reserve_inventory"))


def plant_never_undone(f):
    f.ledger = [e for e in f.ledger if e["operation"] != "release"]


def plant_missing_shipment(f):
    f.ledger = [e for e in f.ledger if e["key"] != "C:create_shipment"]


def plant_lost_occurrence(f):
    f.runs = [r for r in f.runs if r["id"] != "C"]


def plant_doubled_occurrence(f):
    f.runs.append(dict(f.runs[2], id="D", state="cancelled"))


def plant_page_twice(f):
    f.pages.append(("R", 500, 800, 300))


def plant_attempt_missing(f):
    f.attempts = f.attempts[1:]


def plant_alert_twice(f):
    f.alerts.append(dict(f.alerts[0], id=3, created_at=T0 + MINUTE))


def plant_alert_open(f):
    f.alerts[1] = dict(f.alerts[1], state="firing", resolved_at=None)


def plant_no_alert(f):
    f.alerts = f.alerts[1:]


def plant_compensation_error_no_alert(f):
    f.steps.append({"id": 4, "run_id": "B", "name": "release_inventory", "kind": "compensation",
                    "process_state": "error", "attempts": 0})  # fmt: skip


def plant_run_unfinished(f):
    f.runs[0] = dict(f.runs[0], state="running")


def plant_stuck(f):
    f.stuck = {1: 12.5}


@pytest.mark.parametrize(
    ("plant", "invariant"),
    [
        (plant_doubled_effect, "no remote effect twice for one idempotency key"),
        (plant_undone_twice, "every compensated run's effects undone exactly once"),
        (plant_never_undone, "every compensated run's effects undone exactly once"),
        (plant_missing_shipment, "every completed order: one reservation, payment and shipment"),
        (plant_lost_occurrence, "every cron occurrence in the window: one run or one skip row"),
        (plant_doubled_occurrence, "every cron occurrence in the window: one run or one skip row"),
        (plant_page_twice, "every page of every paginated job applied exactly once"),
        (plant_attempt_missing, "every attempt in the history"),
        (plant_alert_twice, "alerts fired, once per incident, and resolved"),
        (plant_alert_open, "alerts fired, once per incident, and resolved"),
        (plant_no_alert, "alerts fired, once per incident, and resolved"),
        (plant_compensation_error_no_alert, "alerts fired, once per incident, and resolved"),
        (plant_run_unfinished, "every run terminal"),
        (plant_stuck, "no step Processing past its deadline + one sweep"),
    ],
)
def test_planted_violation__fails_its_invariant_only(plant, invariant):
    facts = copy.deepcopy(healthy())
    plant(facts)
    failed = failing(facts)
    assert set(failed) == {invariant}, failed
    assert all(failed[invariant])


def test_self_test_plant__is_caught():
    planted, expected = check.plant_violations(healthy())
    assert expected == {
        "no remote effect twice for one idempotency key",
        "every cron occurrence in the window: one run or one skip row",
        "every run terminal",
    }
    assert expected <= set(failing(planted))


def test_window_per_job__ends_before_its_next_fire_time():
    """After the drain each job's window ends before its next fire time (the dispatcher caught
    up): an occurrence at that time is not yet owed, one before it is."""
    jobs = [{"id": 7, "cron": "* * * * *", "timezone": "UTC", "created_at": T0 - timedelta(seconds=30)}]
    window = check.window_occurrences(expand, jobs, {7: T0 + 2 * MINUTE})
    assert window == {7: [T0, T0 + MINUTE]}
    assert check.window_occurrences(expand, jobs, {}) == {}

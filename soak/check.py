"""The soak's invariants (issue 22), each a function of `Facts`: rows read from the database after
the drain, the simulator's ledger, and what the monitor saw during the soak. Pure functions, so
tests plant a violation in real-looking facts and see it caught (tests/soak/test_check.py).

Each returns an `Invariant`: its name, how many things it checked, and one line per violation.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# A job's fire times between two instants, both included (scheduler.dispatcher.cron in the soak).
Expand = Callable[[dict[str, Any], datetime, datetime], Iterable[datetime]]
TERMINAL = {"completed", "compensated", "cancelled", "failed"}
ORDER_WORKFLOW = "order_fulfilment"
REPRICE_WORKFLOW = "catalogue.reprice"
# forward step -> (its ledger operation, the compensation's operation, the payload field naming it)
ORDER_EFFECTS = {
    "reserve_inventory": ("reserve", "release", "reservation_key"),
    "charge_payment": ("charge", "refund", "charge_key"),
    "create_shipment": ("create", "cancel", "shipment_key"),
}
COMPENSATION_OPS = {comp: field for _, comp, field in ORDER_EFFECTS.values()}
# Alert kinds whose condition ends when the system is healthy again: after the drain every
# incident of these must be resolved. The others (a step in Error, a run needing an operator, a
# struggling compensation, failure rates over their window) stay true for their window by design.
TRANSIENT_ALERT_KINDS = {
    "steps_overdue",
    "queue_no_consumer",
    "circuit_open",
    "dispatch_lag",
    "due_backlog",
    "periodic_not_run",
}


@dataclass
class Invariant:
    name: str
    checked: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations


@dataclass
class Facts:
    runs: list[dict[str, Any]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    # (step id, attempt number, status, ended)
    attempts: list[tuple[int, int, str, bool]] = field(default_factory=list)
    # recurring jobs: id, cron, timezone
    jobs: list[dict[str, Any]] = field(default_factory=list)
    # occurrences every recurring job must account for: job id -> fire times in the window
    occurrences: dict[int, list[datetime]] = field(default_factory=dict)
    # skip rows: (job id, scheduled_for, detail)
    skips: list[tuple[int, datetime, dict[str, Any]]] = field(default_factory=list)
    # reprice pages: (run id, page_start, page_end, rows); products in the catalogue
    pages: list[tuple[str, int, int, int]] = field(default_factory=list)
    products: int = 0
    ledger: list[dict[str, Any]] = field(default_factory=list)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    # the monitor's worst observation per step: step id -> seconds Processing past complete_by
    # beyond what the sweep and the injected outages allow
    stuck: dict[int, float] = field(default_factory=dict)


def runs_terminal(f: Facts) -> Invariant:
    inv = Invariant("every run terminal", len(f.runs))
    for run in f.runs:
        if run["state"] not in TERMINAL:
            inv.violations.append(f"run {run['id']} ({run['workflow']}) is {run['state']}")
    return inv


def none_stuck(f: Facts) -> Invariant:
    processing = [s for s in f.steps if s["process_state"] == "processing"]
    inv = Invariant("no step Processing past its deadline + one sweep", len(f.steps))
    for step in processing:
        inv.violations.append(f"step {step['id']} ({step['name']}) still Processing after the drain")
    for step_id, over in sorted(f.stuck.items()):
        inv.violations.append(f"step {step_id} stayed Processing {over:.1f}s past deadline + sweep + outages")
    return inv


def effects_once(f: Facts) -> Invariant:
    by_key = collections.Counter(e["key"] for e in f.ledger)
    inv = Invariant("no remote effect twice for one idempotency key", len(by_key))
    for key, n in sorted(by_key.items()):
        if n > 1:
            inv.violations.append(f"key {key}: {n} ledger effects")
    return inv


def _order_ledger(f: Facts) -> tuple[dict[str, list[dict[str, Any]]], dict[str, list[dict[str, Any]]]]:
    """forward key -> its forward entries; forward key -> compensation entries naming it."""
    forward: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    undone: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for entry in f.ledger:
        target_field = COMPENSATION_OPS.get(entry["operation"])
        if target_field is not None:
            undone[str(entry["payload"].get(target_field))].append(entry)
        elif entry["service"] != "echo":
            forward[entry["key"]].append(entry)
    return forward, undone


def compensations_once(f: Facts) -> Invariant:
    forward, undone = _order_ledger(f)
    undone_runs = [
        r for r in f.runs if r["workflow"] == ORDER_WORKFLOW and r["state"] in {"compensated", "cancelled"}
    ]
    inv = Invariant("every compensated run's effects undone exactly once", len(undone_runs))
    for run in undone_runs:
        for step in ORDER_EFFECTS:
            key = f"{run['id']}:{step}"
            n_undo = len(undone.get(key, []))
            if key in forward and n_undo != 1:
                inv.violations.append(
                    f"{run['state']} run {run['id']}: {step} applied, undone {n_undo} times"
                )
            elif key not in forward and n_undo:
                inv.violations.append(
                    f"{run['state']} run {run['id']}: {step} never applied, undone {n_undo}x"
                )
    return inv


def completed_orders_once(f: Facts) -> Invariant:
    forward, undone = _order_ledger(f)
    done = [r for r in f.runs if r["workflow"] == ORDER_WORKFLOW and r["state"] == "completed"]
    inv = Invariant("every completed order: one reservation, payment and shipment", len(done))
    for run in done:
        for step, (operation, _, _) in ORDER_EFFECTS.items():
            key = f"{run['id']}:{step}"
            applied = [e for e in forward.get(key, []) if e["operation"] == operation]
            if len(applied) != 1 or undone.get(key):
                inv.violations.append(
                    f"completed run {run['id']}: {step} applied {len(applied)}x,"
                    f" undone {len(undone.get(key, []))}x"
                )
    return inv


def cron_occurrences(f: Facts, expand: Expand) -> Invariant:
    """Every occurrence in the window: exactly one first run (job_attempt 0) or one skip row.
    A misfire's skip row covers the occurrences from its detail's `first` to `last`; `expand`
    gives a job's fire times between two instants (both included)."""
    starts: collections.Counter[tuple[int, datetime]] = collections.Counter(
        (r["job_id"], r["scheduled_for"]) for r in f.runs if r["job_id"] is not None and r["job_attempt"] == 0
    )
    jobs = {j["id"]: j for j in f.jobs}
    skipped: collections.Counter[tuple[int, datetime]] = collections.Counter()
    for job_id, scheduled_for, detail in f.skips:
        if job_id not in jobs:
            continue
        if detail.get("first") and detail.get("last"):
            first = datetime.fromisoformat(detail["first"])
            last = datetime.fromisoformat(detail["last"])
            for t in expand(jobs[job_id], first, last):
                skipped[(job_id, t)] += 1
        else:
            skipped[(job_id, scheduled_for)] += 1
    total = sum(len(times) for times in f.occurrences.values())
    inv = Invariant("every cron occurrence in the window: one run or one skip row", total)
    for job_id, times in sorted(f.occurrences.items()):
        for t in times:
            n_run, n_skip = starts[(job_id, t)], skipped[(job_id, t)]
            if n_run + n_skip != 1:
                inv.violations.append(
                    f"job {job_id} occurrence {t.isoformat()}: {n_run} runs, {n_skip} skip rows"
                )
    return inv


def pages_once(f: Facts) -> Invariant:
    states = {r["id"]: r["state"] for r in f.runs if r["workflow"] == REPRICE_WORKFLOW}
    by_run: dict[str, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for run_id, start, end, rows in f.pages:
        by_run[run_id].append((start, end, rows))
    inv = Invariant("every page of every paginated job applied exactly once", len(f.pages))
    for run_id, state in sorted(states.items()):
        pages = sorted(by_run.get(run_id, []))
        starts = collections.Counter(p[0] for p in pages)
        for start, n in starts.items():
            if n > 1:
                inv.violations.append(f"reprice run {run_id}: page after id {start} applied {n} times")
        if state == "completed":
            contiguous = all(pages[i][0] == pages[i - 1][1] for i in range(1, len(pages)))
            rows = sum(p[2] for p in pages)
            if not pages or pages[0][0] != 0 or not contiguous or rows != f.products:
                inv.violations.append(
                    f"completed reprice run {run_id}: {len(pages)} pages, {rows} rows of {f.products},"
                    f" contiguous={contiguous}"
                )
    return inv


def attempts_recorded(f: Facts) -> Invariant:
    rows: dict[int, list[tuple[int, str, bool]]] = collections.defaultdict(list)
    for step_id, number, status, ended in f.attempts:
        rows[step_id].append((number, status, ended))
    total = sum(s["attempts"] for s in f.steps)
    inv = Invariant("every attempt in the history", total)
    for step in f.steps:
        mine = rows.get(step["id"], [])
        numbers = sorted(n for n, _, _ in mine)
        if numbers != list(range(1, step["attempts"] + 1)):
            inv.violations.append(
                f"step {step['id']} ({step['name']}): {step['attempts']} attempts, history has {numbers[:10]}"
            )
        elif step["process_state"] != "processing" and any(not ended for _, _, ended in mine):
            inv.violations.append(
                f"step {step['id']} ({step['name']}) is {step['process_state']}, an attempt never ended"
            )
    return inv


def alerts_once_and_resolved(f: Facts) -> Invariant:
    """Should have fired (alerting/receivers.py): a forward step in Error for want of attempts
    or time (not a refusal for good, such as a declined card: a business outcome) is linked to a
    step_error alert; a compensation in Error (its run only partly undone) to a
    run_needs_operator alert. Once per incident: no two alerts of one key open at the same time.
    Resolved: every incident of a kind whose condition ends with the outage is resolved after
    the drain."""
    should = {
        (s["run_id"], "step_error" if s["kind"] == "forward" else "run_needs_operator")
        for s in f.steps
        if s["process_state"] == "error" and not (s["kind"] == "forward" and s.get("error_permanent"))
    }
    linked = {(run, a["kind"]) for a in f.alerts for run in a["run_ids"]}
    inv = Invariant("alerts fired, once per incident, and resolved", len(should) + len(f.alerts))
    for run_id, kind in sorted(should - linked):
        inv.violations.append(f"run {run_id} has a step in Error and no {kind} alert")
    by_key: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for alert in f.alerts:
        by_key[alert["key"]].append(alert)
    for key, alerts in by_key.items():
        alerts.sort(key=lambda a: a["created_at"])
        for before, after in itertools.pairwise(alerts):
            if before["resolved_at"] is None or before["resolved_at"] > after["created_at"]:
                inv.violations.append(f"alert key {key}: alerts {before['id']} and {after['id']} overlap")
    for alert in f.alerts:
        if alert["kind"] in TRANSIENT_ALERT_KINDS and alert["state"] != "resolved":
            inv.violations.append(f"alert {alert['id']} ({alert['kind']} {alert['key']}): {alert['state']}")
    return inv


def check_all(f: Facts, expand: Expand) -> list[Invariant]:
    return [
        runs_terminal(f),
        none_stuck(f),
        effects_once(f),
        compensations_once(f),
        completed_orders_once(f),
        cron_occurrences(f, expand),
        pages_once(f),
        attempts_recorded(f),
        alerts_once_and_resolved(f),
    ]


def plant_violations(f: Facts) -> tuple[Facts, set[str]]:
    """A copy of `f` with violations planted (the checker's self-test, run after every soak): a
    doubled ledger effect, a lost cron occurrence and a run left Running. Returns the names of
    the invariants that must now fail."""
    import copy

    planted = copy.deepcopy(f)
    expected = set()
    if planted.ledger:
        planted.ledger.append(dict(planted.ledger[0], seq=10**9))
        expected.add("no remote effect twice for one idempotency key")
    starts = [r for r in planted.runs if r["job_id"] is not None and r["job_attempt"] == 0]
    in_window = {(j, t) for j, times in planted.occurrences.items() for t in times}
    lost = next((r for r in starts if (r["job_id"], r["scheduled_for"]) in in_window), None)
    if lost is not None:
        planted.runs.remove(lost)
        expected.add("every cron occurrence in the window: one run or one skip row")
    if planted.runs:
        planted.runs[0] = dict(planted.runs[0], state="running")
        expected.add("every run terminal")
    return planted, expected


def window_occurrences(
    expand: Expand, jobs: list[dict[str, Any]], end: datetime | dict[int, datetime]
) -> dict[int, list[datetime]]:
    """Each recurring job's fire times after its creation and before `end` (per job: its next
    fire time once the dispatcher caught up; a job missing from the dict has none). One instant
    for all: up to it, included."""
    tick = timedelta(microseconds=1)
    ends = end if isinstance(end, dict) else {j["id"]: end + tick for j in jobs}
    return {
        j["id"]: list(expand(j, j["created_at"] + tick, ends[j["id"]] - tick))
        for j in jobs
        if j["id"] in ends
    }

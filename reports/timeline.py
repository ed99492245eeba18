"""A run's timeline: every attempt of every step, the waits between them (backoff after a
failure or a deferral), supervisor recoveries, ignored replies, operator actions and the run's
own events, on one time axis with one lane per step (Temporal's event timeline, Airflow's Gantt).

Built from the execution history (one row per attempt, plus the decisions the scheduler and the
supervisor recorded) and the run's events: three indexed reads by run id. `reports/timeline_chart.py`
draws it; `{% timeline_figure timeline %}` (reports/templatetags/reports.py) embeds it in any page.

The caller scopes the run to its viewer (the order page reads the order through the user's
selector, the admin through its permissions); this module only reads the run it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from scheduler.models import Run, RunEvent, Step, TaskExecutionHistory
from scheduler.outcomes import run_shown
from scheduler.workflows import step_label_of

History = TaskExecutionHistory
UTC_ZONE = ZoneInfo("UTC")
# error_text(operation, raw error) -> what this page may show (the order page shows customer
# reasons, never the remote services' own words; the admin shows them raw).
ErrorText = Callable[[str, str], str]

STATUS_LABELS: dict[str, str] = {
    History.Status.STARTED: "In progress",
    History.Status.SUCCEEDED: "Succeeded",
    History.Status.FAILED_TRANSIENT: "Failed (will retry)",
    History.Status.FAILED_PERMANENT: "Refused (permanent)",
    History.Status.TIMED_OUT: "No answer by its deadline",
    History.Status.CANCELLED: "Stopped",
    History.Status.DEFERRED: "Deferred (did not reach the service)",
    History.Status.REQUEUED: "Not started in time (sent again)",
}
CAUSE_LABELS: dict[str, str] = {
    History.Status.TIMED_OUT: "no reply by the attempt's deadline",
    History.Status.REQUEUED: "no agent started the attempt in time",
    History.Status.FAILED_TRANSIENT: "the attempt failed",
    History.Status.DEFERRED: "the service could not be reached",
}


@dataclass(frozen=True)
class Lane:
    label: str
    kind: str  # run, forward or compensation
    state: str  # the run's or the step's state now
    name: str = ""  # the step's name ("" for the run's lane)


@dataclass(frozen=True)
class Span:
    """A bar: an attempt (`kind` attempt, `status` its outcome), a wait before the next attempt
    (`kind` wait), or the run itself (`kind` run, `status` its state)."""

    lane: int
    kind: str
    status: str
    start: datetime
    end: datetime
    title: str
    open: bool = False  # still going: its end is "now"
    worker: str = ""


@dataclass(frozen=True)
class Mark:
    """A moment: a supervisor recovery, a decision to give up, an ignored reply, an operator's
    action, or one of the run's events. (The chart adds its time to the hover text.)"""

    lane: int
    kind: str  # supervisor, errored, late_reply, operator, event
    at: datetime
    title: str
    status: str = ""


@dataclass(frozen=True)
class Timeline:
    run_id: str
    run_state: str
    start: datetime
    end: datetime
    lanes: list[Lane]
    spans: list[Span]
    marks: list[Mark]
    # The zone every time on it is shown in (its axis, its hover texts): the page's own zone,
    # named on the chart (issue 28: the job's run page header in the job's zone, the axis in UTC).
    zone: str = "UTC"

    @property
    def seconds(self) -> float:
        return max((self.end - self.start).total_seconds(), 0.001)


def _clock(moment: datetime, zone: ZoneInfo = UTC_ZONE) -> str:
    """A moment's wall-clock time in the page's zone (the timeline's `zone`)."""
    return moment.astimezone(zone).strftime("%H:%M:%S.%f")[:-3]


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes} min {secs} s"


def _step_label(run: Run, step: Step) -> str:
    label = step_label_of(run.workflow, step.name)
    return f"\u21ba {label}" if step.kind == Step.Kind.COMPENSATION else label


def _raw(operation: str, error: str) -> str:
    return error


@dataclass(frozen=True)
class RunRows:
    """What a run's timeline is drawn from besides its events: its steps in order, and its
    steps' history rows (attempts and the decisions between them) oldest first, each row's
    `step` the step of `steps` (no query to reach it). A page that shows the steps and the
    attempts too reads them once (`run_rows`) and passes them on (the job's run page)."""

    steps: list[Step]
    rows: list[TaskExecutionHistory]


def run_rows(run: Run) -> RunRows:
    """`RunRows` of `run`: two queries (its steps; its steps' history rows)."""
    steps = list(Step.objects.filter(run_id=run.pk).order_by("seq"))
    by_id = {step.pk: step for step in steps}
    # A step's rows only: a job's attempt rows (kind "job", no step) are the run itself.
    rows = list(History.objects.filter(run_id=run.pk, step__isnull=False).order_by("started_at", "id"))
    for row in rows:
        if row.step_id in by_id:
            row.step = by_id[row.step_id]
    return RunRows(steps=steps, rows=rows)


def run_timeline(
    *,
    run: Run,
    now: datetime,
    error_text: ErrorText = _raw,
    group_repeats: bool = False,
    zone: str = "UTC",
    read: RunRows | None = None,
) -> Timeline:
    """The timeline of `run` as of `now` (the database clock's now, for bars still open). With
    `group_repeats` (the customer's order page), consecutive attempts of a step that ended the
    same way with the same (shown) error are one bar, "attempts 1-18 ... 18 tries", and the
    waits between them are inside it. `zone`: the page's time zone (an IANA name the caller has
    checked, e.g. the job's), for every time the timeline shows. `read`: the run's steps and
    rows if the caller has read them (`run_rows`), else they are read here."""
    tz = ZoneInfo(zone)
    read = read if read is not None else run_rows(run)
    steps, rows = read.steps, read.rows
    events = list(RunEvent.objects.filter(run_id=run.pk).order_by("id"))

    # The run's state as people read it (scheduler/outcomes.py): Failed, not Compensated, when
    # nothing was undone.
    undone = any(s.kind == Step.Kind.COMPENSATION and s.process_state == Step.State.PROCESSED for s in steps)
    run_state, run_label = run_shown(state=run.state, undone=undone)
    lanes = [Lane(label="Run", kind="run", state=run_state)]
    lane_of: dict[int, int] = {}
    for step in steps:
        lane_of[step.pk] = len(lanes)
        lanes.append(
            Lane(label=_step_label(run, step), kind=step.kind, state=step.process_state, name=step.name)
        )
    label_of = {step.pk: lanes[lane_of[step.pk]].label for step in steps}
    operation_of = {step.pk: step.operation for step in steps}

    spans, marks, attempt_of = _history_parts(
        rows,
        lane_of=lane_of,
        label_of=label_of,
        operation_of=operation_of,
        error_text=error_text,
        now=now,
        tz=tz,
    )

    if group_repeats:
        spans = _group_repeats(spans, attempt_of, lanes, tz=tz)
    end_of_run = run.finished_at or now
    spans.insert(0, _run_span(run, state=run_state, label=run_label, now=now, tz=tz))
    marks += [_event_mark(event) for event in events]

    latest = max(
        [end_of_run, *(s.end for s in spans), *(m.at for m in marks)],
        default=end_of_run,
    )
    end = max(latest, run.created_at + timedelta(milliseconds=50))
    return Timeline(
        run_id=str(run.pk),
        run_state=run_state,
        start=run.created_at,
        end=end,
        lanes=lanes,
        spans=spans,
        marks=marks,
        zone=zone,
    )


def _run_span(run: Run, *, state: str, label: str, now: datetime, tz: ZoneInfo) -> Span:
    """The run's own bar, from its submission to its end (or now, open)."""
    end_of_run = run.finished_at or now
    return Span(
        lane=0,
        kind="run",
        status=state,
        start=run.created_at,
        end=end_of_run,
        open=run.finished_at is None,
        title=f"Run {label}\n{_clock(run.created_at, tz)} \u2192 "
        + (_clock(run.finished_at, tz) if run.finished_at else "now")
        + f" ({_duration((end_of_run - run.created_at).total_seconds())})",
    )


def _event_mark(event: RunEvent) -> Mark:
    step = event.data.get("step")
    return Mark(
        lane=0,
        kind="event",
        at=event.created_at,
        status=event.type,
        title=f"{event.get_type_display()}" + (f" ({step})" if step else ""),
    )


def _history_parts(
    rows: list[Any],
    *,
    lane_of: dict[int, int],
    label_of: dict[int, str],
    operation_of: dict[int, str],
    error_text: ErrorText,
    now: datetime,
    tz: ZoneInfo,
) -> tuple[list[Span], list[Mark], dict[int, tuple[str, str]]]:
    """The steps' bars and marks from their history rows: attempts, waits before a retry,
    decisions, ignored replies and operator actions; and each attempt bar's (number, shown
    error), for grouping repeats."""
    # Who replied for an attempt that failed: its decision row names the failed lease.
    replier = {
        str(row.detail.get("failed_lease")): row.worker
        for row in rows
        if row.kind in (History.Kind.SCHEDULER, History.Kind.SUPERVISOR) and row.detail.get("failed_lease")
    }
    # Each step's attempt starts, to end a wait where the next attempt began.
    attempt_starts: dict[int, list[datetime]] = {}
    for row in rows:
        if row.kind == History.Kind.ATTEMPT and row.step_id is not None:
            attempt_starts.setdefault(row.step_id, []).append(row.started_at)

    spans: list[Span] = []
    marks: list[Mark] = []
    # An attempt bar's number and shown error, for grouping repeats.
    attempt_of: dict[int, tuple[str, str]] = {}
    for row in rows:
        lane = lane_of.get(row.step_id) if row.step_id is not None else None
        if lane is None or row.step_id is None:
            continue
        label = label_of[row.step_id]
        error = error_text(operation_of[row.step_id], row.error) if row.error else ""
        if row.kind == History.Kind.ATTEMPT:
            span = _attempt_span(row, lane=lane, label=label, error=error, now=now, replier=replier, tz=tz)
            attempt_of[id(span)] = (str(row.detail.get("attempt") or "?"), error)
            spans.append(span)
        elif row.kind in (History.Kind.SCHEDULER, History.Kind.SUPERVISOR):
            wait = _wait_span(row, lane=lane, label=label, starts=attempt_starts.get(row.step_id, []), tz=tz)
            if wait is not None:
                spans.append(wait)
            if row.kind == History.Kind.SUPERVISOR or row.status == History.Status.ERRORED:
                marks.append(_decision_mark(row, lane=lane, label=label, error=error))
        elif row.kind == History.Kind.LATE_REPLY:
            outcome = row.detail.get("outcome", "")
            text = (
                f"{label}: a late reply ({outcome}) from {row.worker or 'an agent'} was ignored "
                "- its lease was no longer current"
            )
            marks.append(Mark(lane=lane, kind="late_reply", at=row.started_at, status=row.status, title=text))
        else:
            text = f"{label}: operator {row.worker} - {row.detail.get('action', 'action')}"
            text += f"\n{error}" if error else ""
            marks.append(Mark(lane=lane, kind="operator", at=row.started_at, status=row.status, title=text))

    return spans, marks, attempt_of


def _attempt_span(
    row: Any, *, lane: int, label: str, error: str, now: datetime, replier: dict[str, str], tz: ZoneInfo
) -> Span:
    number = row.detail.get("attempt") or "?"
    status_label = STATUS_LABELS.get(row.status, row.get_status_display())
    end = row.ended_at or now
    lines = [
        f"{label} \u00b7 attempt {number}",
        status_label,
        f"{_clock(row.started_at, tz)} \u2192 {_clock(row.ended_at, tz) if row.ended_at else 'now'}"
        f" ({_duration((end - row.started_at).total_seconds())})",
    ]
    if row.worker:
        lines.append(f"claimed by {row.worker}")
    reply_from = replier.get(str(row.lease)) if row.lease else None
    if reply_from:
        lines.append(f"reply from {reply_from}")
    if error:
        lines.append(error[:300])
    return Span(
        lane=lane,
        kind="attempt",
        status=row.status,
        start=row.started_at,
        end=end,
        open=row.ended_at is None,
        title="\n".join(lines),
        worker=row.worker,
    )


def _wait_span(row: Any, *, lane: int, label: str, starts: list[datetime], tz: ZoneInfo) -> Span | None:
    """The backoff after a retry decision: from the decision to the next attempt's start (or to
    the end of the backoff, when none has started yet)."""
    if row.status != History.Status.RETRY_SCHEDULED:
        return None
    backoff = float(row.detail.get("backoff_seconds") or 0)
    later = [s for s in starts if s > row.started_at]
    end = later[0] if later else row.started_at + timedelta(seconds=backoff)
    if end <= row.started_at:
        return None
    cause = CAUSE_LABELS.get(row.detail.get("cause", ""), row.detail.get("cause", ""))
    who = "Supervisor" if row.kind == History.Kind.SUPERVISOR else "Scheduler"
    counted = "" if row.detail.get("counted", True) else " (not counted as a failure)"
    return Span(
        lane=lane,
        kind="wait",
        status="wait",
        start=row.started_at,
        end=end,
        title=f"{label}: waiting to retry\n{who}: {cause}{counted}; retry after {backoff:g} s"
        f"\n{_clock(row.started_at, tz)} \u2192 {_clock(end, tz)}",
    )


def _decision_mark(row: Any, *, lane: int, label: str, error: str) -> Mark:
    cause = CAUSE_LABELS.get(row.detail.get("cause", ""), row.detail.get("cause", ""))
    if row.status == History.Status.ERRORED:
        why = "its deadline passed" if row.detail.get("give_up") == "deadline" else "out of attempts"
        title = f"{label}: gave up ({why}) after {row.retry_count} failures - {cause}"
        kind = "errored"
    else:
        backoff = row.detail.get("backoff_seconds", 0)
        title = f"{label}: supervisor recovered the step - {cause}; retry in {backoff} s"
        kind = "supervisor"
    if error:
        title += f"\n{error[:300]}"
    return Mark(lane=lane, kind=kind, at=row.started_at, status=row.status, title=title)


def _group_repeats(
    spans: list[Span], attempt_of: dict[int, tuple[str, str]], lanes: list[Lane], *, tz: ZoneInfo
) -> list[Span]:
    """Consecutive finished attempts of one lane with the same outcome and shown error as one
    bar (its title says the attempts, the span of time and the tries); the waits between them
    are dropped (they are inside that bar). Spans come in time order."""
    out: list[Span] = []
    # lane -> [index in out, first attempt, last attempt, tries, error]
    open_group: dict[int, list[Any]] = {}
    for span in spans:
        if span.kind != "attempt":
            out.append(span)
            continue
        number, error = attempt_of.get(id(span), ("?", ""))
        group = open_group.get(span.lane)
        head = out[group[0]] if group else None
        if group and head is not None and not span.open and head.status == span.status and group[4] == error:
            group[2], group[3] = number, group[3] + 1
            label = lanes[span.lane].label
            status_label = STATUS_LABELS.get(span.status, span.status)
            title = (
                f"{label} \u00b7 attempts {group[1]}\u2013{number}\n{status_label}\n"
                f"{_clock(head.start, tz)} \u2192 {_clock(span.end, tz)}, {group[3]} tries"
                + (f"\nclaimed by {head.worker}" if head.worker else "")
            )
            out[group[0]] = Span(
                lane=head.lane,
                kind="attempt",
                status=head.status,
                start=head.start,
                end=span.end,
                title=title + (f"\n{error[:300]}" if error else ""),
                worker=head.worker,
            )
            continue
        open_group[span.lane] = [len(out), number, number, 1, error]
        out.append(span)
    # A wait that lies inside a grouped bar was between two of its tries.
    bars = [s for s in out if s.kind == "attempt"]
    return [
        s
        for s in out
        if s.kind != "wait"
        or not any(b.lane == s.lane and b.start <= s.start and s.end <= b.end for b in bars)
    ]

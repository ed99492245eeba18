"""A run's timeline drawn as SVG (a Gantt chart): one lane per step, attempts as bars coloured
by outcome, waits before a retry as light bars, decisions and events as marks; hovering shows
who and why. Built from `reports.timeline.Timeline` with `reports.svg`'s primitives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.utils.safestring import SafeString

from .svg import (
    ATTEMPT_COLOURS,
    ATTEMPT_LEGEND,
    AXIS,
    AXIS_TEXT,
    GRID,
    MARK_COLOURS,
    RUN_STATE_COLOURS,
    WAIT_COLOUR,
    WIDTH,
    axis_text,
    el,
    figure,
    legend,
    mark_shape,
)
from .timeline import Timeline

_TIME_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5,
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400,
)  # fmt: skip
_IDLE = {
    "waiting": "waiting for the step before it",
    "pending": "waiting to be picked up",
    "cancelled": "cancelled - never ran",
}
LANE_LABEL_W, LANE_H = 200, 28


def _time_tick_label(seconds: float, step: float) -> str:
    if step < 1:
        return f"{seconds * 1000:.0f} ms" if seconds < 1 or step < 0.01 else f"{seconds:g} s"
    if step < 60:
        return f"{seconds:g} s"
    if step < 3600:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


def _span_shape(kind: str, status: str, *, x: float, y: float, width: float, open_: bool) -> str:
    """A bar in its lane: the run thin and tinted, a wait thinner and grey, an attempt full
    (dashed outline while it is still going)."""
    style: dict[str, Any]
    if kind == "run":
        colour = RUN_STATE_COLOURS.get(status, "#6b7280")
        inset, style = 8, {"fill_opacity": 0.18, "stroke": colour, "stroke_width": 1.2}
    elif kind == "wait":
        colour, inset, style = WAIT_COLOUR, 11, {"fill_opacity": 0.55}
    else:
        colour = ATTEMPT_COLOURS.get(status, "#6b7280")
        inset, style = 6, {"stroke": "#1e3a8a", "stroke_dasharray": "3 2"} if open_ else {}
    return el("rect", x=x, y=y + inset, width=width, height=LANE_H - 2 * inset, rx=3, fill=colour, **style)


@dataclass(frozen=True)
class _Frame:
    """Where the plot sits on the canvas, and the time axis's scale."""

    timeline: Timeline
    top: float = 44
    right: float = 24

    @property
    def plot_w(self) -> float:
        return WIDTH - LANE_LABEL_W - self.right

    @property
    def bottom(self) -> float:
        return self.top + LANE_H * len(self.timeline.lanes)

    def x_of(self, moment: datetime) -> float:
        seconds = (moment - self.timeline.start).total_seconds()
        return LANE_LABEL_W + self.plot_w * seconds / self.timeline.seconds


def timeline_chart(timeline: Timeline) -> SafeString:
    """One lane per step (the run's own lane first), attempts as bars coloured by outcome,
    waits before a retry as light bars, decisions and events as marks; hover shows who and why."""
    frame, axis_h = _Frame(timeline), 34
    zone = ZoneInfo(timeline.zone)
    parts = [
        _legend_rows(),
        *_lane_stripes(frame),
        *_time_axis(frame, zone),
        *_idle_notes(frame),
        el("line", x1=LANE_LABEL_W, y1=frame.top, x2=LANE_LABEL_W, y2=frame.bottom, stroke=AXIS),
        el("line", x1=LANE_LABEL_W, y1=frame.bottom, x2=WIDTH - frame.right, y2=frame.bottom, stroke=AXIS),
        *_spans(frame),
        *_marks(frame, zone),
    ]
    height = frame.bottom + axis_h
    return figure("timeline", height, f"Timeline of run {timeline.run_id}", *parts, data_run=timeline.run_id)


def _legend_rows() -> str:
    return legend(
        [("rect", ATTEMPT_COLOURS[s], label) for s, label in ATTEMPT_LEGEND[:5]], x=LANE_LABEL_W, y=12
    ) + legend(
        [
            ("wait", WAIT_COLOUR, "Waiting to retry"),
            ("supervisor", MARK_COLOURS["supervisor"], "Supervisor recovery"),
            ("errored", MARK_COLOURS["errored"], "Gave up"),
            ("late_reply", MARK_COLOURS["late_reply"], "Ignored reply"),
            ("operator", MARK_COLOURS["operator"], "Operator"),
        ],
        x=LANE_LABEL_W,
        y=32,
    )


def _lane_stripes(frame: _Frame) -> list[str]:
    """Lanes: a stripe every other one, the label on the left."""
    parts = []
    for i, lane in enumerate(frame.timeline.lanes):
        y = frame.top + i * LANE_H
        if i % 2:
            parts.append(el("rect", x=0, y=y, width=WIDTH, height=LANE_H, fill="#f8fafc"))
        short = lane.label if len(lane.label) <= 26 else lane.label[:25] + "\u2026"
        parts.append(
            el(
                "text",
                title=lane.label,
                text=short,
                class_="lane",
                data_lane=lane.name or "run",
                x=LANE_LABEL_W - 10,
                y=y + LANE_H / 2 + 4,
                font_size=12,
                fill="#1d2433",
                text_anchor="end",
                font_weight="600" if lane.kind == "run" else None,
            )
        )
    return parts


def _time_axis(frame: _Frame, zone: ZoneInfo) -> list[str]:
    """Grid and time axis: seconds since the run was submitted. The first label starts at the
    axis so it never runs into the "since" label left of it."""
    timeline, parts = frame.timeline, []
    total = timeline.seconds
    step = next((s for s in _TIME_STEPS if total / s <= 8), _TIME_STEPS[-1])
    tick = 0.0
    while tick <= total + 1e-9:
        x = LANE_LABEL_W + frame.plot_w * tick / total
        anchor = "start" if tick == 0 else "end" if x > WIDTH - frame.right - 20 else "middle"
        parts.append(el("line", x1=x, y1=frame.top, x2=x, y2=frame.bottom, stroke=GRID))
        parts.append(axis_text(x, frame.bottom + 16, _time_tick_label(tick, step), anchor=anchor))
        tick = round(tick + step, 6)
    # The page's zone, named (issue 28: one time zone per page, labelled).
    start = timeline.start.astimezone(zone)
    since = f"since {start.strftime('%H:%M:%S')} {start.tzname() or timeline.zone}"
    parts.append(axis_text(LANE_LABEL_W - 10, frame.bottom + 16, since, anchor="end"))
    return parts


def _idle_notes(frame: _Frame) -> list[str]:
    """A step with nothing on the time axis says why (not reached yet, or never run)."""
    timeline = frame.timeline
    busy = {span.lane for span in timeline.spans} | {mark.lane for mark in timeline.marks}
    return [
        el(
            "text",
            class_="lane-note",
            x=LANE_LABEL_W + 8,
            y=frame.top + i * LANE_H + LANE_H / 2 + 4,
            font_size=11,
            fill=AXIS_TEXT,
            font_style="italic",
            text=_IDLE.get(lane.state, lane.state),
        )
        for i, lane in enumerate(timeline.lanes)
        if i not in busy
    ]


def _spans(frame: _Frame) -> list[str]:
    timeline, parts = frame.timeline, []
    for span in timeline.spans:
        x0 = frame.x_of(span.start)
        width = max(frame.x_of(span.end) - x0, 3.0)  # an instant still shows
        shape = _span_shape(
            span.kind, span.status, x=x0, y=frame.top + span.lane * LANE_H, width=width, open_=span.open
        )
        parts.append(
            el(
                "g",
                shape,
                title=span.title,
                class_="span",
                data_lane=timeline.lanes[span.lane].name or "run",
                data_kind=span.kind,
                data_status=span.status,
                data_worker=span.worker or None,
            )
        )
    return parts


def _marks(frame: _Frame, zone: ZoneInfo) -> list[str]:
    timeline, parts = frame.timeline, []
    for mark in timeline.marks:
        centre = frame.top + mark.lane * LANE_H + LANE_H / 2
        shape = mark_shape(mark.kind, frame.x_of(mark.at), centre, MARK_COLOURS.get(mark.kind, "#334155"))
        parts.append(
            el(
                "g",
                shape,
                title=f"{mark.title}\n{mark.at.astimezone(zone).strftime('%H:%M:%S.%f')[:-3]}",
                class_="mark",
                data_lane=timeline.lanes[mark.lane].name or "run",
                data_kind=mark.kind,
                data_status=mark.status,
            )
        )
    return parts

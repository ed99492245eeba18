"""Charts as SVG drawn on the server: no JavaScript, no download, readable in any browser and in
a screenshot. Each chart has its axes, tick labels, a legend, and a `<title>` on every bar,
point and mark (the browser shows it on hover).

Every attribute value and every text goes through `_el`, which escapes it; the result is
marked safe only once it is whole.

Colours: run states as in scheduler/states.css (the order pages and the admin use the same);
attempt outcomes in the same families (green succeeded, amber retried, red refused or out of
time, grey never reached the service).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.utils.safestring import SafeString, mark_safe

from .selectors import OUTCOME_LABELS, OUTCOMES, Bucket
from .timeline import Timeline
from .windows import Window

OUTCOME_COLOURS = {
    "completed": "#15803d",
    "compensated": "#7c3aed",
    "failed": "#b91c1c",
    "cancelled": "#64748b",
    "in_progress": "#2563eb",
}
RUN_STATE_COLOURS = {
    "pending": "#6b7280",
    "running": "#2563eb",
    "completed": "#15803d",
    "compensating": "#b45309",
    "compensated": "#7c3aed",
    "cancelled": "#475569",
    "failed": "#b91c1c",
}
ATTEMPT_COLOURS = {
    "started": "#2563eb",
    "succeeded": "#15803d",
    "failed_transient": "#d97706",
    "failed_permanent": "#b91c1c",
    "timed_out": "#9f1239",
    "cancelled": "#475569",
    "deferred": "#94a3b8",
    "requeued": "#64748b",
}
ATTEMPT_LEGEND = (
    ("succeeded", "Succeeded"),
    ("failed_transient", "Failed, retried"),
    ("failed_permanent", "Refused"),
    ("timed_out", "Timed out"),
    ("deferred", "Deferred"),
    ("requeued", "Not started in time"),
    ("cancelled", "Stopped"),
    ("started", "Running"),
)
MARK_COLOURS = {
    "supervisor": "#b45309",
    "errored": "#b91c1c",
    "late_reply": "#334155",
    "operator": "#0e7490",
    "event": "#334155",
}
WAIT_COLOUR = "#94a3b8"
P50_COLOUR = "#2563eb"
P95_COLOUR = "#c2410c"
GRID = "#e4e7ec"
AXIS = "#98a2b3"
AXIS_TEXT = "#667085"
FONT = "system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif"
WIDTH = 960
LEFT, RIGHT = 56, 16  # the bucket charts' plot margins


def _value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return html.escape(str(value), quote=True)


def _el(tag: str, *children: str, text: str | None = None, title: str | None = None, **attrs: object) -> str:
    """One SVG element. Attribute names: `stroke_width` -> stroke-width, `class_` -> class;
    None leaves an attribute out. `text` and `title` are escaped; `children` are elements."""
    names = " ".join(
        f'{name.rstrip("_").replace("_", "-")}="{_value(value)}"'
        for name, value in attrs.items()
        if value is not None
    )
    inner = (f"<title>{html.escape(title)}</title>" if title else "") + "".join(children)
    if text is not None:
        inner += html.escape(text)
    opening = f"<{tag} {names}" if names else f"<{tag}"
    return f"{opening}>{inner}</{tag}>" if inner or tag in ("g", "text") else f"{opening}/>"


def _svg(kind: str, height: float, label: str, *children: str, data_run: str | None = None) -> SafeString:
    body = _el(
        "svg",
        *children,
        class_=f"chart chart-{kind}",
        viewBox=f"0 0 {WIDTH} {height:.0f}",
        role="img",
        aria_label=label,
        font_family=FONT,
        xmlns="http://www.w3.org/2000/svg",
        data_run=data_run,
    )
    return mark_safe(body)  # noqa: S308 - _el escaped every attribute and text


def _axis_text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11) -> str:
    return _el("text", x=x, y=y, font_size=size, fill=AXIS_TEXT, text_anchor=anchor, text=text)


def nice_step(span: float, target: int = 5) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving about `target` ticks."""
    if span <= 0:
        return 1.0
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)


def format_duration(seconds: float | None) -> str:
    """850 ms, 2.40 s, 12.0 s, 3 min 5 s, 2 h 10 min."""
    if seconds is None:
        return "\u2014"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        minutes, secs = divmod(round(seconds), 60)
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours} h {rest // 60} min" if rest // 60 else f"{hours} h"


def _duration_unit(largest: float) -> tuple[float, str]:
    if largest < 1:
        return 0.001, "ms"
    if largest < 120:
        return 1.0, "s"
    if largest < 7200:
        return 60.0, "min"
    return 3600.0, "h"


def _bucket_word(bucket: timedelta) -> str:
    return {300: "5 minutes", 3600: "hour", 86400: "day"}.get(int(bucket.total_seconds()), "bucket")


def _bucket_range(bucket: Bucket, window: Window) -> str:
    """ "Mon 5 Jan 17:30-18:30 (Asia/Kolkata)": on the window's wall clock, the zone named."""
    start, end = window.local(bucket.start), window.local(bucket.end)
    same_day = start.date() == end.date() or end.time().isoformat() == "00:00:00"
    end_text = end.strftime("%H:%M") if same_day else window.text(end)
    return f"{window.text(start, weekday=True)}\u2013{end_text} ({window.tz_name})"


def _mark_shape(kind: str, x: float, y: float, colour: str) -> str:
    if kind == "supervisor":  # a triangle: the supervisor stepped in
        return _el(
            "path", d=f"M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y + 5:.1f} L{x - 6:.1f},{y + 5:.1f} Z", fill=colour
        )
    if kind == "errored":  # a cross: the step gave up
        cross = (
            f"M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} "
            f"M{x + 5:.1f},{y - 5:.1f} L{x - 5:.1f},{y + 5:.1f}"
        )
        return _el("path", d=cross, stroke=colour, stroke_width=2.6)
    if kind == "late_reply":  # a hollow circle: a reply that came too late
        return _el("circle", cx=x, cy=y, r=4.5, fill="#fff", stroke=colour, stroke_width=2)
    if kind == "operator":  # a square: a person acted
        return _el("rect", x=x - 4.5, y=y - 4.5, width=9, height=9, fill=colour)
    return _el("rect", x=x - 1, y=y - 8, width=2, height=16, fill=colour)  # a run event: a tick


def _legend(items: Sequence[tuple[str, str, str]], *, x: float, y: float) -> str:
    """A row of swatches: (shape, colour, label); shape is rect, line, dash, wait or a mark kind."""
    parts, cursor = [], x
    for shape, colour, label in items:
        width = 12.0 if shape == "rect" else 16.0
        if shape in ("line", "dash"):
            dash = "4 3" if shape == "dash" else None
            swatch = _el(
                "line",
                x1=cursor,
                y1=y,
                x2=cursor + 16,
                y2=y,
                stroke=colour,
                stroke_width=2.5,
                stroke_dasharray=dash,
            )
        elif shape == "wait":
            swatch = _el("rect", x=cursor, y=y - 4, width=16, height=8, rx=2, fill=colour, opacity=0.55)
        elif shape in MARK_COLOURS:
            swatch = _mark_shape(shape, cursor + 8, y, colour)
        else:
            swatch = _el("rect", x=cursor, y=y - 6, width=12, height=12, rx=2, fill=colour)
        parts += [
            swatch,
            _el("text", x=cursor + width + 5, y=y + 4, font_size=12, fill="#344054", text=label),
        ]
        cursor += width + 5 + 6.4 * len(label) + 16
    return "".join(parts)


# ---------------------------------------------------------------------------------------------
# Charts over the report's buckets
# ---------------------------------------------------------------------------------------------


def _label_every(buckets: Sequence[Bucket]) -> int:
    """Label every n-th bucket, n a round number (every 3, 6, 12 hours...), at most ~12 labels."""
    every = max(1, math.ceil(len(buckets) / 12))
    return next((n for n in (1, 2, 3, 4, 6, 8, 12, 24, 48) if n >= every), every)


def _x_ticks(buckets: Sequence[Bucket], window: Window, centres: list[float], baseline: float) -> str:
    parts = []
    bucket = window.bucket
    every, seconds = _label_every(buckets), int(bucket.total_seconds())
    first = True
    for i, b in enumerate(buckets):
        start = window.local(b.start)
        slot = (start.hour * 3600 + start.minute * 60) // seconds if seconds < 86400 else start.toordinal()
        # The first bucket is always labelled (a window cut mid-hour starts there); a round
        # tick closer to it than `every` buckets would print over it.
        if i and (slot % every or i < every):
            continue
        day = f"{start.day} {start.strftime('%b')}"
        if bucket >= timedelta(days=1):
            line1, line2 = start.strftime("%a"), day
        else:
            line1 = start.strftime("%H:%M")
            line2 = day if first or (start.hour == 0 and start.minute == 0) else ""
        first = False
        x = centres[i]
        parts.append(_el("line", x1=x, y1=baseline, x2=x, y2=baseline + 4, stroke=AXIS))
        parts.append(_axis_text(x, baseline + 17, line1))
        if line2:
            parts.append(_axis_text(x, baseline + 30, line2))
    return "".join(parts)


def _y_grid(y_max: float, step: float, *, top: float, plot_h: float, unit: str = "") -> str:
    parts, value, baseline = [], 0.0, top + plot_h
    while value <= y_max + 1e-9:
        y = baseline - plot_h * value / y_max
        parts.append(_el("line", x1=LEFT, y1=y, x2=WIDTH - RIGHT, y2=y, stroke=GRID))
        parts.append(_axis_text(LEFT - 8, y + 4, f"{value:g}{unit}", anchor="end"))
        value += step
    return "".join(parts)


def runs_chart(buckets: Sequence[Bucket], *, window: Window) -> SafeString:
    """Runs per bucket, stacked by outcome, with a y axis of run counts; times on the window's
    wall clock."""
    bucket = window.bucket
    height, top, bottom = 280, 40, 46
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - bottom
    baseline = top + plot_h
    largest = max((b.runs for b in buckets), default=0)
    step = max(1.0, nice_step(largest or 1, 4))
    y_max = step * max(1, math.ceil(largest / step))
    band = plot_w / max(len(buckets), 1)
    gap = min(band * 0.2, 6)
    centres = [LEFT + (i + 0.5) * band for i in range(len(buckets))]
    parts = [
        _legend([("rect", OUTCOME_COLOURS[o], OUTCOME_LABELS[o]) for o in OUTCOMES], x=LEFT, y=14),
        _y_grid(y_max, step, top=top, plot_h=plot_h),
        _el(
            "text",
            x=14,
            y=top + plot_h / 2,
            font_size=11,
            fill=AXIS_TEXT,
            text_anchor="middle",
            transform=f"rotate(-90 14 {top + plot_h / 2:.0f})",
            text="runs",
        ),
    ]
    for i, b in enumerate(buckets):
        if not b.runs:
            continue
        summary = [_bucket_range(b, window), f"{b.runs} run{'s' if b.runs != 1 else ''}"]
        summary += [f"{OUTCOME_LABELS[o]}: {b.outcomes[o]}" for o in OUTCOMES if b.outcomes[o]]
        y, segments = float(baseline), []
        for outcome in OUTCOMES:
            count = b.outcomes[outcome]
            if count:
                h = plot_h * count / y_max
                y -= h
                segments.append(
                    _el(
                        "rect",
                        class_="seg",
                        data_outcome=outcome,
                        data_count=count,
                        x=centres[i] - band / 2 + gap / 2,
                        y=y,
                        width=max(band - gap, 1.0),
                        height=h,
                        fill=OUTCOME_COLOURS[outcome],
                    )
                )
        parts.append(
            _el(
                "g",
                *segments,
                title="\n".join(summary),
                class_="bar",
                data_start=window.local(b.start).isoformat(),
                data_runs=b.runs,
            )
        )
    if not largest:
        parts.append(_axis_text(LEFT + plot_w / 2, top + plot_h / 2, "No runs in this window", size=14))
    parts.append(_el("line", x1=LEFT, y1=baseline, x2=WIDTH - RIGHT, y2=baseline, stroke=AXIS))
    parts.append(_x_ticks(buckets, window, centres, baseline))
    return _svg("runs", height, f"Runs per {_bucket_word(bucket)} by outcome", *parts)


def durations_chart(buckets: Sequence[Bucket], *, window: Window) -> SafeString:
    """p50 and p95 of the run durations per bucket; no point where no run finished; times on
    the window's wall clock."""
    bucket = window.bucket
    height, top, bottom = 250, 40, 46
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - bottom
    baseline = top + plot_h
    values = [v for b in buckets for v in (b.p50, b.p95) if v is not None]
    largest = max(values, default=0.0)
    unit, unit_name = _duration_unit(largest)
    step = nice_step((largest / unit) or 1, 4)
    y_max = step * max(1, math.ceil((largest / unit) / step)) if largest else step * 4
    band = plot_w / max(len(buckets), 1)
    centres = [LEFT + (i + 0.5) * band for i in range(len(buckets))]

    def y_of(seconds: float) -> float:
        return baseline - plot_h * (seconds / unit) / y_max

    parts = [
        _legend(
            [("line", P50_COLOUR, "p50 (median) run duration"), ("dash", P95_COLOUR, "p95 run duration")],
            x=LEFT,
            y=14,
        ),
        _y_grid(y_max, step, top=top, plot_h=plot_h, unit=f" {unit_name}"),
    ]
    for name, colour, dash in (("p95", P95_COLOUR, "6 4"), ("p50", P50_COLOUR, None)):
        path, pen_down = [], False
        for i, b in enumerate(buckets):
            v = getattr(b, name)
            if v is None:  # a gap: no run of this bucket has finished
                pen_down = False
                continue
            path.append(f"{'L' if pen_down else 'M'}{centres[i]:.1f},{y_of(v):.1f}")
            pen_down = True
        if path:
            parts.append(
                _el(
                    "path",
                    class_=f"line-{name}",
                    d=" ".join(path),
                    fill="none",
                    stroke=colour,
                    stroke_width=2.2,
                    stroke_dasharray=dash,
                    stroke_linejoin="round",
                )
            )
    for i, b in enumerate(buckets):
        if b.p50 is None:
            continue
        x = centres[i]
        tip = (
            f"{_bucket_range(b, window)}\n{b.finished} finished run{'s' if b.finished != 1 else ''}\n"
            f"p50 {format_duration(b.p50)} \u00b7 p95 {format_duration(b.p95)}"
        )
        parts.append(
            _el(
                "g",
                _el(
                    "circle", cx=x, cy=y_of(b.p95 or 0), r=3.5, fill="#fff", stroke=P95_COLOUR, stroke_width=2
                ),
                _el("circle", cx=x, cy=y_of(b.p50), r=3.5, fill=P50_COLOUR),
                _el("rect", x=x - band / 2, y=top, width=band, height=plot_h, fill="transparent"),
                title=tip,
                class_="point",
                data_start=window.local(b.start).isoformat(),
            )
        )
    if not values:
        parts.append(
            _axis_text(LEFT + plot_w / 2, top + plot_h / 2, "No finished runs in this window", size=14)
        )
    parts.append(_el("line", x1=LEFT, y1=baseline, x2=WIDTH - RIGHT, y2=baseline, stroke=AXIS))
    parts.append(_x_ticks(buckets, window, centres, baseline))
    return _svg("durations", height, f"Run duration percentiles per {_bucket_word(bucket)}", *parts)


# ---------------------------------------------------------------------------------------------
# A run's timeline (Gantt)
# ---------------------------------------------------------------------------------------------

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
    return _el("rect", x=x, y=y + inset, width=width, height=LANE_H - 2 * inset, rx=3, fill=colour, **style)


def timeline_chart(timeline: Timeline) -> SafeString:
    """One lane per step (the run's own lane first), attempts as bars coloured by outcome,
    waits before a retry as light bars, decisions and events as marks; hover shows who and why."""
    right, top, axis_h = 24, 44, 34
    plot_w = WIDTH - LANE_LABEL_W - right
    plot_bottom = top + LANE_H * len(timeline.lanes)
    total = timeline.seconds
    step = next((s for s in _TIME_STEPS if total / s <= 8), _TIME_STEPS[-1])

    def x_of(moment: datetime) -> float:
        return LANE_LABEL_W + plot_w * (moment - timeline.start).total_seconds() / total

    parts = [
        _legend(
            [("rect", ATTEMPT_COLOURS[s], label) for s, label in ATTEMPT_LEGEND[:5]], x=LANE_LABEL_W, y=12
        ),
        _legend(
            [
                ("wait", WAIT_COLOUR, "Waiting to retry"),
                ("supervisor", MARK_COLOURS["supervisor"], "Supervisor recovery"),
                ("errored", MARK_COLOURS["errored"], "Gave up"),
                ("late_reply", MARK_COLOURS["late_reply"], "Ignored reply"),
                ("operator", MARK_COLOURS["operator"], "Operator"),
            ],
            x=LANE_LABEL_W,
            y=32,
        ),
    ]
    # Lanes: a stripe every other one, the label on the left.
    for i, lane in enumerate(timeline.lanes):
        y = top + i * LANE_H
        if i % 2:
            parts.append(_el("rect", x=0, y=y, width=WIDTH, height=LANE_H, fill="#f8fafc"))
        short = lane.label if len(lane.label) <= 26 else lane.label[:25] + "\u2026"
        parts.append(
            _el(
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
    # Grid and time axis: seconds since the run was submitted. The first label starts at the
    # axis so it never runs into the "since" label left of it.
    tick = 0.0
    while tick <= total + 1e-9:
        x = LANE_LABEL_W + plot_w * tick / total
        anchor = "start" if tick == 0 else "end" if x > WIDTH - right - 20 else "middle"
        parts.append(_el("line", x1=x, y1=top, x2=x, y2=plot_bottom, stroke=GRID))
        parts.append(_axis_text(x, plot_bottom + 16, _time_tick_label(tick, step), anchor=anchor))
        tick = round(tick + step, 6)
    # The page's zone, named (issue 28: one time zone per page, labelled).
    zone = ZoneInfo(timeline.zone)
    start = timeline.start.astimezone(zone)
    since = f"since {start.strftime('%H:%M:%S')} {start.tzname() or timeline.zone}"
    parts.append(_axis_text(LANE_LABEL_W - 10, plot_bottom + 16, since, anchor="end"))
    # A step with nothing on the time axis says why (not reached yet, or never run).
    busy = {span.lane for span in timeline.spans} | {mark.lane for mark in timeline.marks}
    for i, lane in enumerate(timeline.lanes):
        if i not in busy:
            parts.append(
                _el(
                    "text",
                    class_="lane-note",
                    x=LANE_LABEL_W + 8,
                    y=top + i * LANE_H + LANE_H / 2 + 4,
                    font_size=11,
                    fill=AXIS_TEXT,
                    font_style="italic",
                    text=_IDLE.get(lane.state, lane.state),
                )
            )
    parts.append(_el("line", x1=LANE_LABEL_W, y1=top, x2=LANE_LABEL_W, y2=plot_bottom, stroke=AXIS))
    parts.append(_el("line", x1=LANE_LABEL_W, y1=plot_bottom, x2=WIDTH - right, y2=plot_bottom, stroke=AXIS))

    for span in timeline.spans:
        x0 = x_of(span.start)
        width = max(x_of(span.end) - x0, 3.0)  # an instant still shows
        shape = _span_shape(
            span.kind, span.status, x=x0, y=top + span.lane * LANE_H, width=width, open_=span.open
        )
        parts.append(
            _el(
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
    for mark in timeline.marks:
        centre = top + mark.lane * LANE_H + LANE_H / 2
        shape = _mark_shape(mark.kind, x_of(mark.at), centre, MARK_COLOURS.get(mark.kind, "#334155"))
        parts.append(
            _el(
                "g",
                shape,
                title=f"{mark.title}\n{mark.at.astimezone(zone).strftime('%H:%M:%S.%f')[:-3]}",
                class_="mark",
                data_lane=timeline.lanes[mark.lane].name or "run",
                data_kind=mark.kind,
                data_status=mark.status,
            )
        )
    height = plot_bottom + axis_h
    return _svg("timeline", height, f"Timeline of run {timeline.run_id}", *parts, data_run=timeline.run_id)

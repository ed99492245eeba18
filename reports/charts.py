"""Charts as SVG drawn on the server: no JavaScript, no download, readable in any browser and in
a screenshot. Each chart has its axes, tick labels, a legend, and a `<title>` on every bar,
point and mark (the browser shows it on hover).

Every piece of text that comes from data (step names, workers, errors) goes through `_esc`;
the result is marked safe only once it is whole.

Colours: run states as in scheduler/states.css (the order pages and the admin use the same);
attempt outcomes in the same families (green succeeded, amber retried, red refused or out of
time, grey never reached the service).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.utils.safestring import SafeString, mark_safe

from .selectors import OUTCOME_LABELS, OUTCOMES, Bucket
from .timeline import Timeline

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
P50_COLOUR = "#2563eb"
P95_COLOUR = "#c2410c"
GRID = "#e4e7ec"
AXIS_TEXT = "#667085"
FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif"'


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _title(text: str) -> str:
    return f"<title>{_esc(text)}</title>"


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
    """850 ms, 2.4 s, 12 s, 3 min 5 s, 2 h 10 min."""
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


def _bucket_label(start: datetime, bucket: timedelta, first: bool) -> tuple[str, str]:
    """Tick label (two lines: time, and the date where a day starts or at the first tick)."""
    date = f"{start.day} {start.strftime('%b')}"
    if bucket >= timedelta(days=1):
        return start.strftime("%a"), date
    line1 = start.strftime("%H:%M")
    return line1, date if first or (start.hour == 0 and start.minute == 0) else ""


def _bucket_range(bucket: Bucket) -> str:
    same_day = bucket.start.date() == bucket.end.date() or bucket.end.time().isoformat() == "00:00:00"
    end = bucket.end.strftime("%H:%M") if same_day else bucket.end.strftime("%d %b %H:%M")
    return f"{bucket.start.strftime('%a %d %b %H:%M')}\u2013{end}"


def _legend(items: Sequence[tuple[str, str, str]], *, x: float, y: float) -> str:
    """A row of swatches: (shape, colour, label); shape is rect, line, dash or a mark kind."""
    parts, cursor = [], x
    for shape, colour, label in items:
        if shape == "line":
            parts.append(
                f'<line x1="{cursor}" y1="{y}" x2="{cursor + 16}" y2="{y}" stroke="{colour}" stroke-width="2.5"/>'
            )
        elif shape == "dash":
            parts.append(
                f'<line x1="{cursor}" y1="{y}" x2="{cursor + 16}" y2="{y}" stroke="{colour}" stroke-width="2.5" '
                'stroke-dasharray="4 3"/>'
            )
        elif shape == "wait":
            parts.append(
                f'<rect x="{cursor}" y="{y - 4}" width="16" height="8" rx="2" fill="{colour}" opacity=".55"/>'
            )
        elif shape in MARK_COLOURS:
            parts.append(_mark_shape(shape, cursor + 8, y, colour))
        else:
            parts.append(f'<rect x="{cursor}" y="{y - 6}" width="12" height="12" rx="2" fill="{colour}"/>')
        width = 16 if shape != "rect" else 12
        parts.append(
            f'<text x="{cursor + width + 5}" y="{y + 4}" font-size="12" fill="#344054">{_esc(label)}</text>'
        )
        cursor += width + 5 + 6.8 * len(label) + 18
    return "".join(parts)


def _empty_note(x: float, y: float, text: str) -> str:
    return f'<text x="{x}" y="{y}" font-size="14" fill="{AXIS_TEXT}" text-anchor="middle">{_esc(text)}</text>'


# ---------------------------------------------------------------------------------------------
# Runs per bucket by outcome (stacked bars)
# ---------------------------------------------------------------------------------------------

WIDTH = 960
LEFT, RIGHT = 56, 16


def _x_ticks(
    buckets: Sequence[Bucket], bucket: timedelta, x_of: list[float], band: float, baseline: float
) -> str:
    parts = []
    every = max(1, math.ceil(len(buckets) / 12))
    # Keep labels on round boundaries (every 3, 6, 12 hours...) rather than wherever they fall.
    for candidate in (1, 2, 3, 4, 6, 8, 12, 24, 48):
        if candidate >= every:
            every = candidate
            break
    seconds = int(bucket.total_seconds())
    first_label = True
    for i, b in enumerate(buckets):
        slot = (
            int((b.start.hour * 3600 + b.start.minute * 60) // seconds)
            if seconds < 86400
            else b.start.toordinal()
        )
        if slot % every and i:
            continue
        x = x_of[i] + band / 2
        line1, line2 = _bucket_label(b.start, bucket, first_label)
        first_label = False
        parts.append(
            f'<line x1="{x:.1f}" y1="{baseline}" x2="{x:.1f}" y2="{baseline + 4}" stroke="#98a2b3"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{baseline + 17}" font-size="11" fill="{AXIS_TEXT}" text-anchor="middle">'
            f"{_esc(line1)}</text>"
        )
        if line2:
            parts.append(
                f'<text x="{x:.1f}" y="{baseline + 30}" font-size="11" fill="{AXIS_TEXT}" text-anchor="middle">'
                f"{_esc(line2)}</text>"
            )
    return "".join(parts)


def runs_chart(buckets: Sequence[Bucket], *, bucket: timedelta, tz_name: str) -> SafeString:
    """Runs per bucket, stacked by outcome, with a y axis of run counts."""
    height, top, bottom = 280, 40, 46
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - bottom
    baseline = top + plot_h
    largest = max((b.runs for b in buckets), default=0)
    step = max(1.0, nice_step(largest or 1, 4))
    y_max = step * max(1, math.ceil(largest / step))
    n = max(len(buckets), 1)
    band = plot_w / n
    gap = min(band * 0.2, 6)
    x_of = [LEFT + i * band for i in range(len(buckets))]
    parts = [
        f'<svg class="chart chart-runs" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="Runs per {_esc(_bucket_word(bucket))} by outcome" {FONT} xmlns="http://www.w3.org/2000/svg">',
        _legend([("rect", OUTCOME_COLOURS[o], OUTCOME_LABELS[o]) for o in OUTCOMES], x=LEFT, y=14),
    ]
    value = 0.0
    while value <= y_max + 1e-9:
        y = baseline - plot_h * value / y_max
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" font-size="11" fill="{AXIS_TEXT}" text-anchor="end">{value:g}</text>'
        )
        value += step
    parts.append(
        f'<text x="14" y="{top + plot_h / 2:.0f}" font-size="11" fill="{AXIS_TEXT}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">runs</text>'
    )
    for i, b in enumerate(buckets):
        if not b.runs:
            continue
        summary = "\n".join(
            [f"{_bucket_range(b)} ({tz_name})", f"{b.runs} run{'s' if b.runs != 1 else ''}"]
            + [f"{OUTCOME_LABELS[o]}: {b.outcomes[o]}" for o in OUTCOMES if b.outcomes[o]]
        )
        y = float(baseline)
        parts.append(
            f'<g class="bar" data-start="{_esc(b.start.isoformat())}" data-runs="{b.runs}">{_title(summary)}'
        )
        for outcome in OUTCOMES:
            count = b.outcomes[outcome]
            if not count:
                continue
            h = plot_h * count / y_max
            y -= h
            parts.append(
                f'<rect class="seg" data-outcome="{outcome}" data-count="{count}" x="{x_of[i] + gap / 2:.1f}" '
                f'y="{y:.1f}" width="{max(band - gap, 1):.1f}" height="{h:.1f}" fill="{OUTCOME_COLOURS[outcome]}"/>'
            )
        parts.append("</g>")
    if not largest:
        parts.append(_empty_note(LEFT + plot_w / 2, top + plot_h / 2, "No runs in this window"))
    parts.append(f'<line x1="{LEFT}" y1="{baseline}" x2="{WIDTH - RIGHT}" y2="{baseline}" stroke="#98a2b3"/>')
    parts.append(_x_ticks(buckets, bucket, x_of, band, baseline))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every data text above is escaped


def _bucket_word(bucket: timedelta) -> str:
    return {300: "5 minutes", 3600: "hour", 86400: "day"}.get(int(bucket.total_seconds()), "bucket")


# ---------------------------------------------------------------------------------------------
# Duration percentiles per bucket (two lines)
# ---------------------------------------------------------------------------------------------


def durations_chart(buckets: Sequence[Bucket], *, bucket: timedelta, tz_name: str) -> SafeString:
    """p50 and p95 of the run durations per bucket; no point where no run finished."""
    height, top, bottom = 250, 40, 46
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - top - bottom
    baseline = top + plot_h
    values = [v for b in buckets for v in (b.p50, b.p95) if v is not None]
    largest = max(values, default=0.0)
    unit, unit_name = _duration_unit(largest)
    step = nice_step((largest / unit) or 1, 4)
    y_max = step * max(1, math.ceil((largest / unit) / step)) if largest else step * 4
    n = max(len(buckets), 1)
    band = plot_w / n
    x_of = [LEFT + i * band for i in range(len(buckets))]
    parts = [
        f'<svg class="chart chart-durations" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="Run duration percentiles per {_esc(_bucket_word(bucket))}" {FONT} '
        'xmlns="http://www.w3.org/2000/svg">',
        _legend(
            [
                ("line", P50_COLOUR, "p50 (median) run duration"),
                ("dash", P95_COLOUR, "p95 run duration"),
            ],
            x=LEFT,
            y=14,
        ),
    ]
    value = 0.0
    while value <= y_max + 1e-9:
        y = baseline - plot_h * value / y_max
        parts.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{LEFT - 8}" y="{y + 4:.1f}" font-size="11" fill="{AXIS_TEXT}" text-anchor="end">'
            f"{value:g} {unit_name}</text>"
        )
        value += step

    def y_of(seconds: float) -> float:
        return baseline - plot_h * (seconds / unit) / y_max

    for name, colour, dash, attr in (
        ("p95", P95_COLOUR, ' stroke-dasharray="6 4"', "p95"),
        ("p50", P50_COLOUR, "", "p50"),
    ):
        path, pen_down = [], False
        for i, b in enumerate(buckets):
            v = getattr(b, attr)
            if v is None:
                pen_down = False
                continue
            x = x_of[i] + band / 2
            path.append(f"{'L' if pen_down else 'M'}{x:.1f},{y_of(v):.1f}")
            pen_down = True
        if path:
            parts.append(
                f'<path class="line-{name}" d="{" ".join(path)}" fill="none" stroke="{colour}" stroke-width="2.2"'
                f'{dash} stroke-linejoin="round"/>'
            )
    for i, b in enumerate(buckets):
        if b.p50 is None:
            continue
        x = x_of[i] + band / 2
        tip = _title(
            f"{_bucket_range(b)} ({tz_name})\n{b.finished} finished run{'s' if b.finished != 1 else ''}\n"
            f"p50 {format_duration(b.p50)} \u00b7 p95 {format_duration(b.p95)}"
        )
        parts.append(
            f'<g class="point" data-start="{_esc(b.start.isoformat())}">{tip}'
            f'<circle cx="{x:.1f}" cy="{y_of(b.p95 or 0):.1f}" r="3.5" fill="#fff" stroke="{P95_COLOUR}" stroke-width="2"/>'
            f'<circle cx="{x:.1f}" cy="{y_of(b.p50):.1f}" r="3.5" fill="{P50_COLOUR}"/>'
            f'<rect x="{x - band / 2:.1f}" y="{top}" width="{band:.1f}" height="{plot_h}" fill="transparent"/></g>'
        )
    if not values:
        parts.append(_empty_note(LEFT + plot_w / 2, top + plot_h / 2, "No finished runs in this window"))
    parts.append(f'<line x1="{LEFT}" y1="{baseline}" x2="{WIDTH - RIGHT}" y2="{baseline}" stroke="#98a2b3"/>')
    parts.append(_x_ticks(buckets, bucket, x_of, band, baseline))
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every data text above is escaped


# ---------------------------------------------------------------------------------------------
# A run's timeline (Gantt)
# ---------------------------------------------------------------------------------------------

_TIME_STEPS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5,
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 21600, 43200, 86400,
)  # fmt: skip


def _time_tick_label(seconds: float, step: float) -> str:
    if step < 1:
        return f"{seconds * 1000:.0f} ms" if seconds < 1 or step < 0.01 else f"{seconds:g} s"
    if step < 60:
        return f"{seconds:g} s"
    if step < 3600:
        return f"{seconds / 60:g} min"
    return f"{seconds / 3600:g} h"


def _mark_shape(kind: str, x: float, y: float, colour: str) -> str:
    if kind == "supervisor":  # a triangle: the supervisor stepped in
        return f'<path d="M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y + 5:.1f} L{x - 6:.1f},{y + 5:.1f} Z" fill="{colour}"/>'
    if kind == "errored":  # a cross: the step gave up
        return (
            f'<path d="M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} M{x + 5:.1f},{y - 5:.1f} '
            f'L{x - 5:.1f},{y + 5:.1f}" stroke="{colour}" stroke-width="2.6"/>'
        )
    if kind == "late_reply":  # a hollow circle: a reply that came too late
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4.5" fill="#fff" stroke="{colour}" stroke-width="2"/>'
    if kind == "operator":  # a square: a person acted
        return f'<rect x="{x - 4.5:.1f}" y="{y - 4.5:.1f}" width="9" height="9" fill="{colour}"/>'
    # a run event: a thin tick
    return f'<rect x="{x - 1:.1f}" y="{y - 8:.1f}" width="2" height="16" fill="{colour}"/>'


def timeline_chart(timeline: Timeline) -> SafeString:
    """One lane per step (the run's own lane first), attempts as bars coloured by outcome,
    waits before a retry as light bars, decisions and events as marks; hover shows who and why."""
    label_w, right = 200, 24
    lane_h, top, axis_h = 28, 44, 34
    plot_w = WIDTH - label_w - right
    height = top + lane_h * len(timeline.lanes) + axis_h
    total = timeline.seconds
    step = next((s for s in _TIME_STEPS if total / s <= 8), _TIME_STEPS[-1])

    def x_of(moment: datetime) -> float:
        return label_w + plot_w * (moment - timeline.start).total_seconds() / total

    parts = [
        f'<svg class="chart chart-timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="Timeline of run {_esc(timeline.run_id)}" data-run="{_esc(timeline.run_id)}" {FONT} '
        'xmlns="http://www.w3.org/2000/svg">',
        _legend([("rect", ATTEMPT_COLOURS[s], label) for s, label in ATTEMPT_LEGEND[:5]], x=label_w, y=12),
        _legend(
            [
                ("wait", "#94a3b8", "Waiting to retry"),
                ("supervisor", MARK_COLOURS["supervisor"], "Supervisor recovery"),
                ("errored", MARK_COLOURS["errored"], "Gave up"),
                ("late_reply", MARK_COLOURS["late_reply"], "Ignored reply"),
                ("operator", MARK_COLOURS["operator"], "Operator"),
            ],
            x=label_w,
            y=32,
        ),
    ]
    plot_bottom = top + lane_h * len(timeline.lanes)
    # Grid and time axis (seconds since the run was submitted).
    tick = 0.0
    while tick <= total + 1e-9:
        x = label_w + plot_w * tick / total
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{plot_bottom}" stroke="{GRID}"/>')
        parts.append(
            f'<text x="{x:.1f}" y="{plot_bottom + 16}" font-size="11" fill="{AXIS_TEXT}" text-anchor="middle">'
            f"{_esc(_time_tick_label(tick, step))}</text>"
        )
        tick = round(tick + step, 6)
    parts.append(
        f'<text x="{label_w - 10}" y="{plot_bottom + 16}" font-size="11" fill="{AXIS_TEXT}" text-anchor="end">'
        f"since {_esc(timeline.start.strftime('%H:%M:%S'))} UTC</text>"
    )
    for i, lane in enumerate(timeline.lanes):
        y = top + i * lane_h
        if i % 2:
            parts.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{lane_h}" fill="#f8fafc"/>')
        weight = ' font-weight="600"' if lane.kind == "run" else ""
        label = lane.label if len(lane.label) <= 26 else lane.label[:25] + "\u2026"
        parts.append(
            f'<text class="lane" data-lane="{_esc(lane.name or "run")}" x="{label_w - 10}" y="{y + lane_h / 2 + 4}" '
            f'font-size="12" fill="#1d2433" text-anchor="end"{weight}>{_title(lane.label)}{_esc(label)}</text>'
        )
    parts.append(f'<line x1="{label_w}" y1="{top}" x2="{label_w}" y2="{plot_bottom}" stroke="#98a2b3"/>')
    parts.append(
        f'<line x1="{label_w}" y1="{plot_bottom}" x2="{WIDTH - right}" y2="{plot_bottom}" stroke="#98a2b3"/>'
    )

    for span in timeline.spans:
        y = top + span.lane * lane_h
        x0, x1 = x_of(span.start), x_of(span.end)
        width = max(x1 - x0, 3.0)
        lane_name = timeline.lanes[span.lane].name or "run"
        data = f'data-lane="{_esc(lane_name)}" data-kind="{span.kind}" data-status="{_esc(span.status)}"'
        if span.worker:
            data += f' data-worker="{_esc(span.worker)}"'
        if span.kind == "run":
            colour = RUN_STATE_COLOURS.get(span.status, "#6b7280")
            shape = (
                f'<rect x="{x0:.1f}" y="{y + 8}" width="{width:.1f}" height="{lane_h - 16}" rx="3" '
                f'fill="{colour}" fill-opacity=".18" stroke="{colour}" stroke-width="1.2"/>'
            )
        elif span.kind == "wait":
            shape = (
                f'<rect x="{x0:.1f}" y="{y + 11}" width="{width:.1f}" height="{lane_h - 22}" rx="2" '
                'fill="#94a3b8" fill-opacity=".55"/>'
            )
        else:
            colour = ATTEMPT_COLOURS.get(span.status, "#6b7280")
            outline = ' stroke="#1e3a8a" stroke-dasharray="3 2"' if span.open else ""
            shape = (
                f'<rect x="{x0:.1f}" y="{y + 6}" width="{width:.1f}" height="{lane_h - 12}" rx="3" '
                f'fill="{colour}"{outline}/>'
            )
        parts.append(f'<g class="span" {data}>{_title(span.title)}{shape}</g>')

    for mark in timeline.marks:
        y = top + mark.lane * lane_h + lane_h / 2
        colour = MARK_COLOURS.get(mark.kind, "#334155")
        lane_name = timeline.lanes[mark.lane].name or "run"
        parts.append(
            f'<g class="mark" data-lane="{_esc(lane_name)}" data-kind="{mark.kind}" data-status="{_esc(mark.status)}">'
            f"{_title(mark.title)}{_mark_shape(mark.kind, x_of(mark.at), y, colour)}</g>"
        )
    parts.append("</svg>")
    return mark_safe("".join(parts))  # noqa: S308 - every data text above is escaped

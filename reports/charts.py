"""The report's charts (seed 004's reporting service): runs per bucket by outcome, and run
duration percentiles - SVG drawn on the server from `reports.svg`'s primitives: no JavaScript,
no download, readable in any browser and in a screenshot. Each chart has its axes, tick labels,
a legend, and a `<title>` on every bar and point (the browser shows it on hover).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta

from django.utils.safestring import SafeString

from .selectors import OUTCOME_LABELS, OUTCOMES, Bucket
from .svg import (
    AXIS,
    AXIS_TEXT,
    GRID,
    LEFT,
    OUTCOME_COLOURS,
    P50_COLOUR,
    P95_COLOUR,
    RIGHT,
    WIDTH,
    axis_text,
    el,
    figure,
    format_duration,
    legend,
    nice_step,
)
from .windows import Window


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
        parts.append(el("line", x1=x, y1=baseline, x2=x, y2=baseline + 4, stroke=AXIS))
        parts.append(axis_text(x, baseline + 17, line1))
        if line2:
            parts.append(axis_text(x, baseline + 30, line2))
    return "".join(parts)


def _y_grid(y_max: float, step: float, *, top: float, plot_h: float, unit: str = "") -> str:
    parts, value, baseline = [], 0.0, top + plot_h
    while value <= y_max + 1e-9:
        y = baseline - plot_h * value / y_max
        parts.append(el("line", x1=LEFT, y1=y, x2=WIDTH - RIGHT, y2=y, stroke=GRID))
        parts.append(axis_text(LEFT - 8, y + 4, f"{value:g}{unit}", anchor="end"))
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
        legend([("rect", OUTCOME_COLOURS[o], OUTCOME_LABELS[o]) for o in OUTCOMES], x=LEFT, y=14),
        _y_grid(y_max, step, top=top, plot_h=plot_h),
        el(
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
                    el(
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
            el(
                "g",
                *segments,
                title="\n".join(summary),
                class_="bar",
                data_start=window.local(b.start).isoformat(),
                data_runs=b.runs,
            )
        )
    if not largest:
        parts.append(axis_text(LEFT + plot_w / 2, top + plot_h / 2, "No runs in this window", size=14))
    parts.append(el("line", x1=LEFT, y1=baseline, x2=WIDTH - RIGHT, y2=baseline, stroke=AXIS))
    parts.append(_x_ticks(buckets, window, centres, baseline))
    return figure("runs", height, f"Runs per {_bucket_word(bucket)} by outcome", *parts)


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
        legend(
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
                el(
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
            el(
                "g",
                el(
                    "circle", cx=x, cy=y_of(b.p95 or 0), r=3.5, fill="#fff", stroke=P95_COLOUR, stroke_width=2
                ),
                el("circle", cx=x, cy=y_of(b.p50), r=3.5, fill=P50_COLOUR),
                el("rect", x=x - band / 2, y=top, width=band, height=plot_h, fill="transparent"),
                title=tip,
                class_="point",
                data_start=window.local(b.start).isoformat(),
            )
        )
    if not values:
        parts.append(
            axis_text(LEFT + plot_w / 2, top + plot_h / 2, "No finished runs in this window", size=14)
        )
    parts.append(el("line", x1=LEFT, y1=baseline, x2=WIDTH - RIGHT, y2=baseline, stroke=AXIS))
    parts.append(_x_ticks(buckets, window, centres, baseline))
    return figure("durations", height, f"Run duration percentiles per {_bucket_word(bucket)}", *parts)

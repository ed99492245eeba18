"""SVG drawn on the server, the primitives every chart of reports/ is made of: one escaping
element builder (`el`: every attribute value and every text escaped; the result is marked safe
only once it is whole, by `figure`), axis text, legends, mark shapes, the colours and the
number formats.

Colours: run states as in scheduler/states.css (the order pages and the admin use the same);
attempt outcomes in the same families (green succeeded, amber retried, red refused or out of
time, grey never reached the service).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from django.utils.safestring import SafeString, mark_safe

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


def el(tag: str, *children: str, text: str | None = None, title: str | None = None, **attrs: object) -> str:
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


def figure(kind: str, height: float, label: str, *children: str, data_run: str | None = None) -> SafeString:
    body = el(
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
    return mark_safe(body)  # noqa: S308 - el escaped every attribute and text


def axis_text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11) -> str:
    return el("text", x=x, y=y, font_size=size, fill=AXIS_TEXT, text_anchor=anchor, text=text)


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


def mark_shape(kind: str, x: float, y: float, colour: str) -> str:
    if kind == "supervisor":  # a triangle: the supervisor stepped in
        return el(
            "path", d=f"M{x:.1f},{y - 6:.1f} L{x + 6:.1f},{y + 5:.1f} L{x - 6:.1f},{y + 5:.1f} Z", fill=colour
        )
    if kind == "errored":  # a cross: the step gave up
        cross = (
            f"M{x - 5:.1f},{y - 5:.1f} L{x + 5:.1f},{y + 5:.1f} "
            f"M{x + 5:.1f},{y - 5:.1f} L{x - 5:.1f},{y + 5:.1f}"
        )
        return el("path", d=cross, stroke=colour, stroke_width=2.6)
    if kind == "late_reply":  # a hollow circle: a reply that came too late
        return el("circle", cx=x, cy=y, r=4.5, fill="#fff", stroke=colour, stroke_width=2)
    if kind == "operator":  # a square: a person acted
        return el("rect", x=x - 4.5, y=y - 4.5, width=9, height=9, fill=colour)
    return el("rect", x=x - 1, y=y - 8, width=2, height=16, fill=colour)  # a run event: a tick


def legend(items: Sequence[tuple[str, str, str]], *, x: float, y: float) -> str:
    """A row of swatches: (shape, colour, label); shape is rect, line, dash, wait or a mark kind."""
    parts, cursor = [], x
    for shape, colour, label in items:
        width = 12.0 if shape == "rect" else 16.0
        if shape in ("line", "dash"):
            dash = "4 3" if shape == "dash" else None
            swatch = el(
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
            swatch = el("rect", x=cursor, y=y - 4, width=16, height=8, rx=2, fill=colour, opacity=0.55)
        elif shape in MARK_COLOURS:
            swatch = mark_shape(shape, cursor + 8, y, colour)
        else:
            swatch = el("rect", x=cursor, y=y - 6, width=12, height=12, rx=2, fill=colour)
        parts += [
            swatch,
            el("text", x=cursor + width + 5, y=y + 4, font_size=12, fill="#344054", text=label),
        ]
        cursor += width + 5 + 6.4 * len(label) + 16
    return "".join(parts)

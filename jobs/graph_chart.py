"""The customer's job graph (issue 30), an SVG drawn on the server like the run timeline
(reports/svg.py's escaping primitives and colours): jobs as boxes in columns by depth (a job
sits one column right of its deepest parent), each box coloured by its last run's state and
linked to its page; each edge an arrow parent -> child, drawn by its condition (solid: on
success, dashed: on failure, dotted: on either), coloured by the last outcome of its parent it
saw (green: let the child run, red: did not, grey: none yet), labelled with the condition and,
on hover, the outcome and its logical time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.urls import reverse
from django.utils.safestring import SafeString

from reports.svg import AXIS_TEXT, RUN_STATE_COLOURS, WIDTH, el, figure, legend
from scheduler.models import DependencyCondition, Job, JobDependency

BOX_W, BOX_H = 190, 54
# Room between columns for an edge's label ("on success \u00b7 succeeded", written along its end).
COL_GAP, ROW_GAP = 170, 30
TOP, LEFT = 56, 16
DASHES: dict[str, str | None] = {
    DependencyCondition.ON_SUCCESS.value: None,
    DependencyCondition.ON_FAILURE.value: "7 4",
    DependencyCondition.ON_EITHER.value: "2 4",
}
MATCHED, NOT_MATCHED, UNSEEN = "#15803d", "#b91c1c", "#98a2b3"
CONDITION_TEXT: dict[str, str] = {
    DependencyCondition.ON_SUCCESS.value: "on success",
    DependencyCondition.ON_FAILURE.value: "on failure",
    DependencyCondition.ON_EITHER.value: "on either",
}


def graph_layout(jobs: Sequence[Job], edges: Sequence[JobDependency]) -> dict[int, tuple[int, int]]:
    """(column, row) of each job: column = the longest path from a job with no parent (the
    graph has no cycle: refused at save); rows in name order within a column."""
    parents: dict[int, list[int]] = {job.pk: [] for job in jobs}
    for edge in edges:
        parents.setdefault(edge.child_id, []).append(edge.parent_id)
    depth: dict[int, int] = {}

    def depth_of(job_id: int, seen: frozenset[int] = frozenset()) -> int:
        if job_id not in depth:
            ups = [p for p in parents.get(job_id, []) if p not in seen]
            depth[job_id] = 1 + max((depth_of(p, seen | {job_id}) for p in ups), default=-1)
        return depth[job_id]

    columns: dict[int, int] = {}
    place: dict[int, tuple[int, int]] = {}
    for job in sorted(jobs, key=lambda j: j.name):
        col = depth_of(job.pk)
        place[job.pk] = (col, columns.get(col, 0))
        columns[col] = columns.get(col, 0) + 1
    return place


def _box(job: Job, x: float, y: float) -> str:
    state = getattr(job, "last_run_state", None) or ""
    colour = RUN_STATE_COLOURS.get(state, "#d0d5dd")
    tip = f"{job.name}: last run {state or 'none yet'}" + ("" if job.enabled else " (paused)")
    name = job.name if len(job.name) <= 24 else job.name[:23] + "\u2026"
    inner = el(
        "g",
        el("rect", x=x, y=y, width=BOX_W, height=BOX_H, rx=7, fill="#fff", stroke=colour, stroke_width=2.2),
        el("rect", x=x, y=y, width=7, height=BOX_H, rx=3, fill=colour),
        el("text", x=x + 16, y=y + 20, font_size=13, font_weight=600, fill="#101828", text=name),
        el(
            "text",
            x=x + 16,
            y=y + 37,
            font_size=11,
            fill=AXIS_TEXT,
            text=(state or "not run yet") + ("" if job.enabled else " \u00b7 paused"),
        ),
        title=tip,
        class_="graph-job",
        data_job=job.pk,
        data_state=state or "none",
    )
    return el("a", inner, href=reverse("jobs:detail", args=[job.pk]))


def _arrow(
    edge: JobDependency, names: dict[int, str], start: tuple[float, float], end: tuple[float, float]
) -> tuple[str, str]:
    """The edge (its curve and arrowhead) and, apart, its label: the chart draws every label
    after every curve, so no curve crosses a label's text."""
    (x1, y1), (x2, y2) = start, end
    colour = UNSEEN if edge.last_matched is None else MATCHED if edge.last_matched else NOT_MATCHED
    mid = (x1 + x2) / 2
    path = f"M{x1:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {x2 - 8:.1f},{y2:.1f}"
    head = f"M{x2:.1f},{y2:.1f} L{x2 - 9:.1f},{y2 - 5:.1f} L{x2 - 9:.1f},{y2 + 5:.1f} Z"
    condition = CONDITION_TEXT.get(edge.condition, edge.condition)
    last = (
        f"last: {edge.last_outcome} for {edge.last_logical_time:%Y-%m-%d %H:%M:%S} UTC "
        f"({'ran the child' if edge.last_matched else 'did not run the child'})"
        if edge.last_logical_time is not None
        else "no outcome yet"
    )
    tip = f"{names[edge.parent_id]} \u2192 {names[edge.child_id]}: {condition}; {last}"
    label = condition + ("" if edge.last_outcome == "" else f" \u00b7 {edge.last_outcome}")
    curve = el(
        "g",
        el(
            "path",
            d=path,
            fill="none",
            stroke=colour,
            stroke_width=2,
            stroke_dasharray=DASHES.get(edge.condition),
        ),
        el("path", d=head, fill=colour),
        title=tip,
        class_="graph-edge",
        data_parent=edge.parent_id,
        data_child=edge.child_id,
        data_condition=edge.condition,
        data_last=edge.last_outcome or "none",
    )
    text = el(
        "text",
        x=x2 - 12,
        y=y2 - 5,
        font_size=11,
        fill=colour,
        text_anchor="end",
        text=label,
        paint_order="stroke",
        stroke="#fff",
        stroke_width=4,
        class_="graph-edge-label",
        data_parent=edge.parent_id,
        data_child=edge.child_id,
    )
    return curve, text


def _ports(
    edges: Sequence[JobDependency],
    *,
    key: Callable[[JobDependency], int],
    other: Callable[[JobDependency], tuple[int, int]],
) -> dict[int, float]:
    """Where each edge leaves (or reaches) its box, as a fraction of the box's height: a box's
    k edges spread evenly down its side, in the order of their other ends' rows (fewer
    crossings), so their labels do not sit on one another."""
    sides: dict[int, list[JobDependency]] = {}
    for edge in edges:
        sides.setdefault(key(edge), []).append(edge)
    return {
        edge.pk: (index + 1) / (len(side) + 1)
        for side in sides.values()
        for index, edge in enumerate(sorted(side, key=lambda e: (other(e)[1], other(e)[0])))
    }


def graph_chart(jobs: Sequence[Job], edges: Sequence[JobDependency]) -> SafeString:
    """The owner's job graph as an SVG figure (`scheduler.dispatcher.selectors.job_graph`)."""
    place = graph_layout(jobs, edges)
    names = {job.pk: job.name for job in jobs}
    rows = max((r for _, r in place.values()), default=0) + 1
    cols = max((c for c, _ in place.values()), default=0) + 1
    width = max(WIDTH, LEFT * 2 + cols * BOX_W + (cols - 1) * COL_GAP)
    height = TOP + rows * (BOX_H + ROW_GAP) + 10

    def corner(job_id: int) -> tuple[float, float]:
        col, row = place[job_id]
        return LEFT + col * (BOX_W + COL_GAP), TOP + row * (BOX_H + ROW_GAP)

    parts: list[Any] = [
        legend(
            [
                ("line", MATCHED, "last outcome ran the child"),
                ("line", NOT_MATCHED, "did not"),
                ("line", UNSEEN, "no outcome yet"),
                ("line", "#344054", "solid: on success"),
                ("dash", "#344054", "dashed: on failure, dotted: on either"),
            ],
            x=LEFT,
            y=20,
        )
    ]
    drawn = [e for e in edges if e.parent_id in place and e.child_id in place]
    outs = _ports(drawn, key=lambda e: e.parent_id, other=lambda e: place[e.child_id])
    ins = _ports(drawn, key=lambda e: e.child_id, other=lambda e: place[e.parent_id])
    labels = []
    for edge in drawn:
        px, py = corner(edge.parent_id)
        cx, cy = corner(edge.child_id)
        start = (px + BOX_W, py + BOX_H * outs[edge.pk])
        curve, label = _arrow(edge, names, start, (cx, cy + BOX_H * ins[edge.pk]))
        parts.append(curve)
        labels.append(label)
    parts += labels
    parts += [_box(job, *corner(job.pk)) for job in jobs]
    chart = figure("jobgraph", height, f"Graph of {len(jobs)} jobs and {len(edges)} dependencies", *parts)
    if width > WIDTH:  # a wide graph: the viewBox grows (the page scrolls it sideways)
        chart = SafeString(chart.replace(f'viewBox="0 0 {WIDTH} ', f'viewBox="0 0 {width} ', 1))
    return chart

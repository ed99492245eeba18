"""The job graph page (issue 30): the signed-in customer's jobs that wait for one another, drawn
by `graph_chart`, with each edge's condition and last outcome; the edges as a table too (what a
screen reader and a test read)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from scheduler.dispatcher.selectors import job_graph

from .graph_chart import CONDITION_TEXT, graph_chart


@login_required
@require_GET
def job_graph_view(request: HttpRequest) -> HttpResponse:
    user_id = request.user.pk
    assert isinstance(user_id, int)
    jobs, edges = job_graph(owner_id=user_id)
    names = {job.pk: job.name for job in jobs}
    rows = [
        {
            "parent": names[e.parent_id],
            "parent_id": e.parent_id,
            "child": names[e.child_id],
            "child_id": e.child_id,
            "condition": CONDITION_TEXT.get(e.condition, e.condition),
            "last_outcome": e.last_outcome,
            "last_logical_time": e.last_logical_time,
            "last_matched": e.last_matched,
        }
        for e in edges
    ]
    svg = graph_chart(jobs, edges) if edges else ""
    return render(request, "jobs/job_graph.html", {"svg": svg, "edges": rows, "jobs": jobs})

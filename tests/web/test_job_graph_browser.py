"""The job graph page (issue 30) in headless Chromium: a customer's jobs that wait for one
another, their outcomes made by the real dispatcher (the test plays the agents): every edge
drawn with its condition and last outcome (green ran the child, red did not, grey none yet),
each job linked to its page; another customer's graph is not shown. Screenshot
`jobs-graph-01.png` in the artifacts folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.models import Job

from ..orders.conftest import make_user
from ..scheduler.jobs_support import compensate, complete, dispatch, make_due, new_job, runs_of
from .conftest import open_page
from .test_browser import _sign_in

_GRAPH_JS = """() => ({
  edges: Array.from(document.querySelectorAll("svg.chart-jobgraph g.graph-edge")).map(g => ({
    parent: Number(g.dataset.parent), child: Number(g.dataset.child), condition: g.dataset.condition,
    last: g.dataset.last, colour: g.querySelector("path").getAttribute("stroke"),
    label: document.querySelector("svg.chart-jobgraph text.graph-edge-label"
      + `[data-parent="${g.dataset.parent}"][data-child="${g.dataset.child}"]`).textContent,
    tip: g.querySelector("title").textContent,
  })),
  jobs: Array.from(document.querySelectorAll("svg.chart-jobgraph g.graph-job")).map(g => ({
    id: Number(g.dataset.job), state: g.dataset.state, href: g.closest("a").getAttribute("href"),
  })),
  rows: Array.from(document.querySelectorAll("#job-edges tbody tr")).map(r => r.innerText),
})"""


def _parents(*pairs: tuple[Job, str]) -> list[dict[str, Any]]:
    return [{"job": job.pk, "condition": condition} for job, condition in pairs]


def _graph(user: Any) -> dict[str, Job]:
    """import and clean-up (hourly) -> report (both on success) -> archive (on either); import
    -> page-on-call (on failure). This hour: import and clean-up succeed; report runs."""
    jobs = {"import": new_job(user, name="nightly import"), "clean": new_job(user, name="clean up")}
    jobs["report"] = new_job(
        user,
        name="report",
        cron="",
        parents=_parents((jobs["import"], "on_success"), (jobs["clean"], "on_success")),
    )
    jobs["page"] = new_job(
        user, name="page on-call", cron="", parents=_parents((jobs["import"], "on_failure"))
    )
    jobs["archive"] = new_job(user, name="archive", cron="", parents=_parents((jobs["report"], "on_either")))
    for name in ("import", "clean"):
        make_due(jobs[name])
    dispatch()
    for name in ("import", "clean"):
        complete(runs_of(jobs[name])[0])
    dispatch()  # settles both: report's gate completes and its run starts; page-on-call blocked
    assert len(runs_of(jobs["report"])) == 1 and runs_of(jobs["page"]) == []
    return jobs


@pytest.mark.usefixtures("manual_scheduler")
def test_browser__job_graph__edges_with_conditions_and_last_outcomes__only_the_owners(
    live_db: None, engine_paused: None, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("graph")
    jobs = _graph(user)
    other = make_user("graph-other")
    theirs = new_job(other, name="theirs")
    their_child = new_job(other, name="their child", cron="", parents=_parents((theirs, "on_success")))
    make_due(theirs)
    dispatch()
    compensate(runs_of(theirs)[0])
    dispatch()

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        page.goto("/jobs/")
        page.click("#job-graph-link")
        page.wait_for_selector("svg.chart-jobgraph")
        page.hover("svg.chart-jobgraph g.graph-edge >> nth=0")
        page.screenshot(path=str(artifacts_dir / "jobs-graph-01.png"), full_page=True)
        seen = page.evaluate(_GRAPH_JS)

    ids = {name: job.pk for name, job in jobs.items()}
    edges = {(e["parent"], e["child"]): e for e in seen["edges"]}
    assert set(edges) == {
        (ids["import"], ids["report"]),
        (ids["clean"], ids["report"]),
        (ids["import"], ids["page"]),
        (ids["report"], ids["archive"]),
    }
    ran = edges[(ids["import"], ids["report"])]
    assert (ran["condition"], ran["last"], ran["colour"]) == ("on_success", "succeeded", "#15803d")
    assert ran["label"] == "on success \u00b7 succeeded"
    assert "nightly import \u2192 report: on success; last: succeeded for " in ran["tip"]
    assert ran["tip"].endswith("(ran the child)")
    blocked = edges[(ids["import"], ids["page"])]
    assert (blocked["condition"], blocked["last"], blocked["colour"]) == (
        "on_failure",
        "succeeded",
        "#b91c1c",
    )
    assert blocked["tip"].endswith("(did not run the child)")
    waiting = edges[(ids["report"], ids["archive"])]
    assert (waiting["last"], waiting["colour"], waiting["label"]) == ("none", "#98a2b3", "on either")
    boxes = {j["id"]: j for j in seen["jobs"]}
    assert set(boxes) == set(ids.values())  # not the other customer's jobs
    assert {theirs.pk, their_child.pk}.isdisjoint(boxes)
    assert boxes[ids["import"]]["state"] == "completed" and boxes[ids["report"]]["state"] == "pending"
    assert boxes[ids["archive"]]["href"] == f"/jobs/{ids['archive']}/"
    assert len(seen["rows"]) == 4
    assert any(r.startswith("nightly import\treport\ton success\tsucceeded for ") for r in seen["rows"]), (
        seen["rows"]
    )

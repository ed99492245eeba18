"""How a run ended, as people read it: one rule for every page and report (issue 28).

The engine's Compensated means "the compensation phase ran to its end". When the failed step
was the first to have any effect - an HTTP call answered 500, a task raised, a card declined on
the first step - there was nothing to undo: no compensation step was created, and the run still
ends Compensated in the engine (its operators' tools, alerts and retries read that state, and
Failed there means "undoing needs an operator"). A person reading "Compensated" / "Undone"
there is told something that did not happen. So a run is shown as Compensated only if some
step of it was undone - a compensation step of the run reached Processed - and as Failed
otherwise. The API's `state` stays the engine's; the pages (job list, job page, run page,
history) and the reports show `run_shown_state`. reports/sql/report.sql writes the same
predicate in SQL (`undone`), beside a comment naming this module.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, OuterRef

from .models import Run, Step

NOTHING_UNDONE_LABEL = "Failed"


def run_undone(run_ref: str = "pk") -> Exists:
    """Exists: the run `OuterRef(run_ref)` has a compensation step that reached Processed (some
    work of it was undone). One probe of the step table's run index per row."""
    return Exists(
        Step.objects.filter(
            run_id=OuterRef(run_ref), kind=Step.Kind.COMPENSATION, process_state=Step.State.PROCESSED
        )
    )


def run_shown(*, state: str, undone: bool | None) -> tuple[str, str]:
    """(state, label) a person reads: a Compensated run that undid nothing is ("failed",
    "Failed") - it failed, and nothing needs an operator; every other state is the engine's,
    with its label. `undone` None (not known) leaves the engine's state."""
    if state == Run.State.COMPENSATED and undone is False:
        return str(Run.State.FAILED), NOTHING_UNDONE_LABEL
    return state, str(Run.State(state).label)


def run_undone_of(obj: Any, attribute: str = "undone") -> bool | None:
    """The annotation `attribute` of a row (None when the query did not annotate it)."""
    value = getattr(obj, attribute, None)
    return None if value is None else bool(value)

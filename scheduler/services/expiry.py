"""Schedule-to-start: job occurrences that waited too long for their first step to start are
skipped, not left queued behind a backlog (issue 18, docs/operating/fairness.md)."""

from __future__ import annotations

import logging

from django.db import transaction

from scheduler import transitions

from .events import events_announce

logger = logging.getLogger(__name__)


def runs_skip_unstarted(*, batch: int) -> transitions.Skipped:
    """Skip up to `batch` job occurrences whose first step passed its schedule-to-start
    deadline without being claimed (`transitions.run_skip_unstarted`), and announce the
    "cancelled" events of observed ones.

    Invariant: a step that a claim holds is not skipped (SKIP LOCKED; it starts, late), and an
    occurrence is skipped once (the guard: step Pending, never claimed; run Pending). Two
    supervisors at once give the same result as one. Transaction: its own; the job's history
    row and the run's end commit together, so the jobs layer settles a skipped run like any
    cancelled one (no retry).
    """
    with transaction.atomic():
        skipped = transitions.run_skip_unstarted(batch=batch)
        events_announce(skipped.events)
    if skipped.runs:
        logger.warning(
            "schedule-to-start: %d job occurrence(s) skipped, not started in time (%s)",
            len(skipped.runs),
            skipped.runs[0].error,
        )
    return skipped

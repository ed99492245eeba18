"""The operator's bulk resubmission (issue 21; the operator's room since issue 27): every step that
failed for one reason in one window - first a dry run that says what would be done with each row
and why (it asks the one selector, `ops.run_actions.run_actions_fitting`, per run), then each row
resubmitted by its own audited service (`ops.run_services`), refused if it changed since.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet

from scheduler.keys import step_key_choice, step_refusal_repeats
from scheduler.models import Run, Step

from .audit import OperatorRefused, audit_record, reason_checked
from .models import OperatorAction
from .run_actions import Fit, run_actions_fitting
from .run_services import run_resubmit, step_resubmit_by_operator

Action = OperatorAction.Action

# A bulk resubmission acts on at most this many steps (the dry run shows the same cap).
BULK_LIMIT = 500


@dataclass(frozen=True)
class BulkItem:
    """One step the bulk resubmission found, and what it would do with it: `plan` is
    "resubmit_step" (a compensation step of a Failed run, or a forward step of a run that has
    undone nothing yet: in place), "resubmit_run" (a forward step whose
    run is Compensated: a new run) or "skip" (with `why`). `token` names the row and its
    updated_at as shown, for the confirmation (a row changed since is skipped as stale).
    `repeats`: the refusal code when the step was refused for a reason in the run's input (a
    declined card): resubmitted as is, it would be refused again (`scheduler.keys`,
    `step_refusal_repeats`); such rows are skipped unless the operator includes them. `key`:
    which idempotency key a resubmitted step would send, in words."""

    step_id: int
    run_id: str
    step_name: str
    kind: str
    run_state: str
    error: str
    failed_at: datetime | None
    plan: str
    why: str
    token: str
    repeats: str = ""
    key: str = ""


def steps_failed_matching_queryset(*, reason: str, since: datetime, until: datetime) -> QuerySet[Step]:
    """The bulk search: steps in Error whose last error contains `reason` (case-insensitive)
    that errored in [since, until), oldest first, at most BULK_LIMIT + 1. Index-backed: a range
    scan of step_error_finished_idx (finished_at WHERE Error) over the window, the text matched
    on those rows only - its cost is the window's errored steps, never the table
    (tests/ops/test_bulk.py EXPLAINs it; bench/README.md, "Alerting", has the plan)."""
    return (
        Step.objects.select_related("run")
        .filter(
            process_state=Step.State.ERROR,
            last_error__icontains=reason,
            finished_at__gte=since,
            finished_at__lt=until,
        )
        .order_by("finished_at", "id")[: BULK_LIMIT + 1]
    )


def steps_failed_matching(*, reason: str, since: datetime, until: datetime) -> list[Step]:
    """`steps_failed_matching_queryset`'s rows (the caller says when there are more than
    BULK_LIMIT)."""
    return list(steps_failed_matching_queryset(reason=reason, since=since, until=until))


def _bulk_plan_of(step: Step, fitting: list[Fit]) -> tuple[str, str, str]:
    """What the bulk does with `step`, from the one selector's answer for its run (`fitting`),
    with the words that say why."""
    run = step.run
    if any(f.action == "resubmit_step" and f.step is not None and f.step.pk == step.pk for f in fitting):
        why = (
            "compensation in Error: back to Pending, run back to Compensating"
            if step.kind == Step.Kind.COMPENSATION
            else "nothing undone yet: back to Pending in place, run back to Running"
        )
        return "resubmit_step", why, f"step:{step.pk}:{step.updated_at.isoformat()}"
    if step.kind == Step.Kind.COMPENSATION:
        return "skip", f"run is {run.get_state_display()}", ""
    if any(f.action == "resubmit_run" for f in fitting):
        return (
            "resubmit_run",
            "run compensated: a new run of the same input",
            f"run:{run.pk}:{run.updated_at.isoformat()}",
        )
    if run.state == Run.State.COMPENSATED:
        return "skip", "run already resubmitted", ""
    if run.state == Run.State.COMPENSATING:
        return "skip", "run still compensating: try again once it is compensated", ""
    return "skip", f"run is {run.get_state_display()}: resubmit its compensation first", ""


def _bulk_key_of(step: Step, plan: str) -> str:
    if plan == "resubmit_step":
        return step_key_choice(step).note
    if plan == "resubmit_run":
        return "a new run: new idempotency keys for every step"
    return ""


def bulk_resubmit_plan(
    *, reason: str, since: datetime, until: datetime, include_repeats: bool = False
) -> list[BulkItem]:
    """The dry run: what `bulk_resubmit` would do with every step that failed for `reason` in
    the window, and why. Changes nothing. At most one new run per run. A step refused for a
    reason in its run's input (a declined card, an item out of stock: `step_refusal_repeats`)
    would be refused again: it is marked, and skipped unless `include_repeats`."""
    if not reason.strip():
        raise OperatorRefused("reason", "give the error text to match (part of the steps' last error)")
    if until <= since:
        raise OperatorRefused("input", "the window's end must be after its start", {"until": ["after from"]})
    steps = steps_failed_matching(reason=reason.strip(), since=since, until=until)[:BULK_LIMIT]
    # The selector once per run (two queries each), not per step.
    fitting: dict[uuid.UUID, list[Fit]] = {}
    for step in steps:
        if step.run_id not in fitting:
            fitting[step.run_id] = run_actions_fitting(
                run=step.run, actions=("resubmit_step", "resubmit_run")
            )
    items: list[BulkItem] = []
    planned_runs: set[uuid.UUID] = set()
    for step in steps:
        plan, why, token = _bulk_plan_of(step, fitting[step.run_id])
        repeats = step_refusal_repeats(step, workflow=step.run.workflow)
        if repeats and plan != "skip" and not include_repeats:
            plan, token = "skip", ""
            why = (
                f"would be refused again: refused for a reason in the input ({repeats}); include "
                "refusals that would be refused again to resubmit it anyway, or start a new run "
                "with an edited input from the run's page"
            )
        if plan == "resubmit_run":
            if step.run_id in planned_runs:
                plan, why, token = "skip", "another step of this run is resubmitted with it", ""
            planned_runs.add(step.run_id)
        items.append(
            BulkItem(
                step_id=step.pk,
                run_id=str(step.run_id),
                step_name=step.name,
                kind=step.kind,
                run_state=step.run.state,
                error=step.last_error[:300],
                failed_at=step.finished_at,
                plan=plan,
                why=why,
                token=token,
                repeats=repeats,
                key=_bulk_key_of(step, plan),
            )
        )
    return items


@dataclass(frozen=True)
class BulkOutcome:
    token: str
    done: bool
    message: str
    new_run_id: str = ""


def bulk_resubmit(
    *, tokens: Sequence[str], user: AbstractBaseUser, reason: str, match: str
) -> list[BulkOutcome]:
    """Do what the dry run showed: each token (`step:<id>:<updated_at>` or `run:<id>:<updated_at>`,
    from `bulk_resubmit_plan`) is resubmitted in its own transaction, refused if its row changed
    since the dry run (stale) or left its state; every outcome is reported. One audit entry per
    row acted on, and one for the whole (counts, the error text matched). At most BULK_LIMIT."""
    why = reason_checked(reason)
    if len(tokens) > BULK_LIMIT:
        raise OperatorRefused("input", f"at most {BULK_LIMIT} rows at once", {"tokens": ["too many"]})
    outcomes: list[BulkOutcome] = []
    for token in tokens:
        kind, _, rest = token.partition(":")
        ident, _, seen_text = rest.partition(":")
        try:
            seen = datetime.fromisoformat(seen_text)
            if kind == "step":
                step_resubmit_by_operator(step_id=int(ident), user=user, reason=f"bulk: {why}", seen=seen)
                outcomes.append(BulkOutcome(token, True, "step resubmitted"))
            elif kind == "run":
                entry = run_resubmit(run_id=uuid.UUID(ident), user=user, reason=f"bulk: {why}", seen=seen)
                outcomes.append(BulkOutcome(token, True, "new run started", new_run_id=str(entry.new_run_id)))
            else:
                outcomes.append(BulkOutcome(token, False, "not a row of the dry run"))
        except (ValueError, TypeError):
            outcomes.append(BulkOutcome(token, False, "not a row of the dry run"))
        except OperatorRefused as exc:
            outcomes.append(BulkOutcome(token, False, str(exc)))
    done = sum(1 for o in outcomes if o.done)
    if outcomes:
        audit_record(
            action=Action.BULK_RESUBMIT,
            user=user,
            reason=why,
            target=f"error contains {match!r}"[:200],
            detail={"rows": len(outcomes), "done": done, "refused": len(outcomes) - done},
        )
    return outcomes

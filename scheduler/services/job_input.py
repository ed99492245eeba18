"""What a job's fields may hold (seed 004, issue 18): the ranges, the messages and the check of
a whole job's input, asked by every service that writes a job - and, for the ranges and messages,
by the API's serializer, its schema and the form. Changes when a rule about a job's input
changes; never writes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sasproject.names import control_characters_error
from scheduler.dispatcher import transitions as job_transitions
from scheduler.dispatcher.cron import cron_error, cron_normalise, cron_preview, year_error, zone_error
from scheduler.limits import (
    CUSTOMER_PRIORITY_DEFAULT,
    CUSTOMER_PRIORITY_MAX,
    CUSTOMER_PRIORITY_MIN,
    STAFF_PRIORITY_MAX,
    STAFF_PRIORITY_MIN,
)
from scheduler.models import Job
from scheduler.permissions import users_staff_may
from scheduler.workflows import Workflow, WorkflowInputError, get_workflow, workflow_permit

from .submit import run_validate_input

# The ranges of a job's numbers (inclusive), checked here for every caller; the API's schema,
# its serializer and the form declare the same (issue 18: a number is bounded before any
# arithmetic - `timedelta(seconds=1e20)` was a 500).
MAX_RETRY_MAX = 100
RETRY_BACKOFF_MAX = 86_400  # seconds
CATCHUP_WINDOW_MAX = timedelta(days=366)
JITTER_MAX = 3_600  # seconds
MAX_FIRINGS_MAX = 2_000_000_000
# Their messages, the same from the API's serializer, the form and here.
RETRY_BACKOFF_MESSAGE = f"must be between 0 and {RETRY_BACKOFF_MAX} seconds (more than 0)"
CATCHUP_WINDOW_MESSAGE = (
    f"must be a duration between 0 and {CATCHUP_WINDOW_MAX.days} days "
    f"(0 to {int(CATCHUP_WINDOW_MAX.total_seconds())} seconds)"
)


def range_message(low: int, high: int) -> str:
    return f"must be a whole number between {low} and {high}"


def aware_datetime(value: Any, name: str, errors: dict[str, str]) -> datetime | None:
    """`value` if a datetime with a time zone in a year we handle; else None and an error on `name`."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None:
        errors[name] = "must be a date and time with a time zone"
        return None
    if why := year_error(value):  # before any arithmetic on it
        errors[name] = why
        return None
    return value


def _holds_nul(value: Any, depth: int = 0) -> bool:
    """A NUL in any string or key of `value` (PostgreSQL's text and jsonb refuse it). Bounded
    depth: deeper than 64 levels is refused too."""
    if depth > 64:
        return True
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, Mapping):
        return any(_holds_nul(k, depth + 1) or _holds_nul(v, depth + 1) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(item, depth + 1) for item in value)
    return False


def _int_in(value: Any, name: str, low: int, high: int, errors: dict[str, str]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors[name] = range_message(low, high)
        return 0
    return value


def job_permit(*, workflow: Workflow, owner_id: int, by_staff: bool) -> None:
    """Staff-only work needs a person acting and an owner who may both do staff work
    (`scheduler.permissions.staff_may`: `by_staff` is the caller's answer for the person);
    customer-schedulable work is anyone's; a workflow that is no job target is nobody's.
    Raises WorkflowNotPermitted (a field error on `workflow`). Reads only (the owner's
    permission, and only for staff-only work asked for by someone who may)."""
    workflow_permit(workflow, staff=by_staff)
    if not workflow.customer_schedulable:
        workflow_permit(workflow, staff=bool(users_staff_may(user_ids=[owner_id])), owner=True)


def priority_error(value: Any, *, staff: bool) -> str | None:
    """Why `value` is not a priority the caller may set (None: it is). Customers choose in the
    band below system work (scheduler/limits.py); staff (the admin) in the whole SMALLINT range."""
    low, high = (
        (STAFF_PRIORITY_MIN, STAFF_PRIORITY_MAX) if staff else (CUSTOMER_PRIORITY_MIN, CUSTOMER_PRIORITY_MAX)
    )
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        if staff:
            return f"must be a whole number between {low} and {high}"
        return (
            f"must be a whole number between {low} and {high}: customer jobs run below "
            "system work (orders, exports: 0; webhook deliveries: -1)"
        )
    return None


# A one-off time typed to the minute (the form's datetime-local) is the current minute for up to
# a minute: that much in the past is "now", not a mistake.
RUN_AT_PAST_GRACE = timedelta(seconds=60)


def run_at_past_error(run_at: datetime, *, now: datetime, zone: str = "UTC") -> str:
    """The one rule for a one-off job's time in the past (issue 28: it was accepted and run at
    once without a word): refused, naming the time, unless within RUN_AT_PAST_GRACE of now. To
    run at once, leave the time empty (a one-off job without a time runs now) or use "Run now".
    The form and the API both ask it (through `_clean`); a time left as it was on an edit (the
    job already ran at it) is not asked again. "" when the time is fine. The times are told in
    `zone` (the job's, checked by the caller)."""
    if run_at >= now - RUN_AT_PAST_GRACE:
        return ""
    tz = ZoneInfo(zone)
    return (
        f"the time is in the past ({run_at.astimezone(tz):%Y-%m-%d %H:%M} {zone}; now is "
        f"{now.astimezone(tz):%Y-%m-%d %H:%M}): choose a later time, or leave it empty to run "
        "the job at once"
    )


def job_input_clean(
    *,
    owner_id: int,
    by_staff: bool,
    data: Mapping[str, Any],
    job_id: int | None = None,
    current_priority: int | None = None,
    current_run_at: datetime | None = None,
) -> dict[str, Any]:
    """Every field checked; all errors at once, as a form does. Returns model field values.
    Raises WorkflowInputError; reads only (the name's uniqueness per owner). Staff-only work
    for someone who may not schedule it raises WorkflowNotPermitted at once, alone (one error,
    on `workflow`): nothing else of the request is looked at. The priority: customers' band
    unless `by_staff`; one left as it was (`current_priority`, an edit) is not checked again."""
    errors: dict[str, Any] = {}
    out: dict[str, Any] = {}
    _clean_workflow(data, out, errors, owner_id=owner_id, by_staff=by_staff)
    _clean_name(data, out, errors)
    _clean_schedule(data, out, errors)
    _clean_retries(data, out, errors)
    _clean_priority(data, out, errors, by_staff=by_staff, current_priority=current_priority)
    _clean_overlap(data, out, errors)
    _clean_jitter(data, out, errors)
    _clean_times(data, out, errors, current_run_at=current_run_at)
    if "name" not in errors:
        clash = Job.objects.filter(owner_id=owner_id, name=out["name"])
        if job_id is not None:
            clash = clash.exclude(pk=job_id)
        if clash.exists():
            errors["name"] = "you already have a job with this name"
    if errors:
        raise WorkflowInputError(errors)
    return out


def _clean_workflow(
    data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any], *, owner_id: int, by_staff: bool
) -> None:
    try:
        wanted = get_workflow(str(data["workflow"]))
    except WorkflowInputError as exc:  # unknown: reported with every other field's errors
        errors.update(exc.errors)
    else:
        job_permit(workflow=wanted, owner_id=owner_id, by_staff=by_staff)
        try:
            definition, cleaned = run_validate_input(workflow=wanted.name, input=data["input"])
            out["workflow"], out["input"] = definition.name, cleaned
        except WorkflowInputError as exc:
            errors.update(exc.errors)


def _clean_name(data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any]) -> None:
    name = str(data["name"]).strip()
    if not name or len(name) > 200:
        errors["name"] = "must be 1 to 200 characters"
    elif why := control_characters_error(name):
        # A name reaches its alerts' e-mails: a CR/LF there made Django refuse them (issue 26);
        # a NUL made PostgreSQL refuse the INSERT (issue 22). sasproject/names.py.
        errors["name"] = why
    if _holds_nul(data["input"]):
        errors.setdefault("input", "a string holds a NUL character (\\u0000), which is not accepted")
    out["name"] = name


def _clean_schedule(data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any]) -> None:
    cron = cron_normalise(str(data["cron"] or ""))
    recurring = data.get("recurring")
    recurring = bool(cron) if recurring is None else bool(recurring)
    if recurring and (why := cron_error(cron)):
        errors["cron"] = why
    if not recurring and cron:
        errors["cron"] = "a one-off job has no cron expression"
    out["cron"], out["is_recurring"] = cron, recurring
    zone = str(data["timezone_name"] or "")
    if why := zone_error(zone):
        errors["timezone"] = why
    out["timezone"] = zone


def _clean_retries(data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any]) -> None:
    out["max_retry"] = _int_in(data["max_retry"], "max_retry", 0, MAX_RETRY_MAX, errors)
    backoff = data["retry_backoff"]
    if isinstance(backoff, timedelta):
        backoff = backoff.total_seconds()
    if (
        isinstance(backoff, bool)
        or not isinstance(backoff, int | float)
        or not 0 < backoff <= RETRY_BACKOFF_MAX
    ):
        errors["retry_backoff"] = RETRY_BACKOFF_MESSAGE
        backoff = 10
    out["retry_backoff"] = timedelta(seconds=backoff)


def _clean_priority(
    data: Mapping[str, Any],
    out: dict[str, Any],
    errors: dict[str, Any],
    *,
    by_staff: bool,
    current_priority: int | None,
) -> None:
    priority = CUSTOMER_PRIORITY_DEFAULT if data["priority"] is None else data["priority"]
    kept = current_priority is not None and priority == current_priority
    if why := priority_error(priority, staff=by_staff or kept):
        errors["priority"] = why
        priority = CUSTOMER_PRIORITY_DEFAULT
    out["priority"] = priority


def _clean_overlap(data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any]) -> None:
    out["idempotent"] = bool(data["idempotent"])
    policy = data["overlap_policy"]
    if policy not in Job.Overlap.values:
        errors["overlap_policy"] = f"must be one of {', '.join(Job.Overlap.values)}"
    elif policy == Job.Overlap.ALLOW_ALL and not out["idempotent"]:
        errors["overlap_policy"] = "a job that is not idempotent cannot allow overlapping runs"
    out["overlap_policy"] = policy
    window = data["catchup_window"]
    if window is not None and (
        not isinstance(window, timedelta) or window < timedelta(0) or window > CATCHUP_WINDOW_MAX
    ):
        errors["catchup_window"] = CATCHUP_WINDOW_MESSAGE
    out["catchup_window"] = window


def _clean_jitter(data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any]) -> None:
    out["jitter"] = _int_in(data["jitter"], "jitter", 0, JITTER_MAX, errors)
    if out["jitter"] and out["is_recurring"] and "cron" not in errors and "timezone" not in errors:
        # A delay as long as the gap to the next occurrence would make occurrences overtake
        # each other (and be taken for misfires).
        times = cron_preview(out["cron"], out["timezone"], start=datetime(2001, 1, 1, tzinfo=UTC), count=6)
        gap = min((b - a for a, b in itertools.pairwise(times)), default=timedelta(days=1))
        if timedelta(seconds=out["jitter"]) >= gap:
            errors["jitter"] = (
                f"must be shorter than the time between occurrences ({int(gap.total_seconds())} s)"
            )


def _clean_times(
    data: Mapping[str, Any], out: dict[str, Any], errors: dict[str, Any], *, current_run_at: datetime | None
) -> None:
    recurring = out["is_recurring"]
    start_at = aware_datetime(data["start_at"], "start_at", errors)
    end_at = aware_datetime(data["end_at"], "end_at", errors)
    run_at = aware_datetime(data["run_at"], "run_at", errors)
    if start_at and end_at and end_at <= start_at:
        errors["end_at"] = "must be after the start time"
    max_firings = data["max_firings"]
    if max_firings is not None:
        max_firings = _int_in(max_firings, "max_firings", 1, MAX_FIRINGS_MAX, errors)
    if not recurring:
        for key, value in (
            ("start_at", start_at),
            ("end_at", end_at),
            ("max_firings", max_firings),
            ("catchup_window", out["catchup_window"]),
        ):
            if value is not None and key not in errors:
                errors[key] = "only a recurring job has this"
    elif run_at is not None:
        errors["run_at"] = "only a one-off job has a run time"
    if not recurring and run_at is not None and run_at != current_run_at and "run_at" not in errors:
        shown_in = "UTC" if "timezone" in errors else out["timezone"]
        if why := run_at_past_error(run_at, now=job_transitions.db_now(), zone=shown_in):
            errors["run_at"] = why
    out.update(start_at=start_at, end_at=end_at, run_at=run_at, max_firings=max_firings)

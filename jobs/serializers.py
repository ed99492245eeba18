"""API shapes for jobs. Input serializers check JSON types and the numbers' ranges field by field
(a number is bounded before any arithmetic on it; the ranges are the job service's constants, so
the schema declares what the service enforces), and refuse unknown fields; every other rule
(cron, time zone, years, end after start, the workflow's input) is the job service's, and its
errors come back under the same field names (`errors.split_errors`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sasproject.api_input import (
    ClosedSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from sasproject.names import control_characters_refuse
from scheduler.dispatcher.cron import YEAR_MAX, YEAR_MIN, zone_error
from scheduler.limits import CUSTOMER_PRIORITY_DEFAULT, CUSTOMER_PRIORITY_MAX, CUSTOMER_PRIORITY_MIN
from scheduler.models import DependencyCondition, HistoryStatus, OverlapPolicy, RunState
from scheduler.serializers import StepOutputSerializer
from scheduler.services.job_input import (
    CATCHUP_WINDOW_MAX,
    CATCHUP_WINDOW_MESSAGE,
    JITTER_MAX,
    MAX_FIRINGS_MAX,
    MAX_RETRY_MAX,
    RETRY_BACKOFF_MAX,
    RETRY_BACKOFF_MESSAGE,
    range_message,
)

JOB_STATES = [("active", "Active"), ("paused", "Paused"), ("finished", "Finished")]


PRIORITY_RANGE = (
    f"must be a whole number between {CUSTOMER_PRIORITY_MIN} and {CUSTOMER_PRIORITY_MAX}: customer "
    "jobs run below system work (orders, exports: 0; webhook deliveries: -1)"
)


class LocalDateTimeField(serializers.DateTimeField):
    """An aware date-time written with its own offset (DRF would convert it to the site's zone):
    preview times read in the job's time zone."""

    def to_representation(self, value: Any) -> str:
        return str(value.isoformat())


class JobTimeField(serializers.DateTimeField):
    """An ISO 8601 date and time of a job (run_at, start_at, end_at, a backfill's range). With an
    offset it is that instant; without one it is the job's wall clock - read in the job's time
    zone (`in_zone`), as the form and the preview read it - never the site's (issue 20)."""

    def enforce_timezone(self, value: datetime) -> datetime:
        return value if value.tzinfo is None else super().enforce_timezone(value)


# A datetime stays a datetime, None stays None (one definition for both, no overloads).
_MaybeDatetime = TypeVar("_MaybeDatetime", datetime, None)


def in_zone(value: _MaybeDatetime, zone_name: str) -> _MaybeDatetime:
    """`value` as an instant: a naive one read in `zone_name` (left naive if the zone is bad: the
    service then names both the zone and the time)."""
    if value is None or value.tzinfo is not None or zone_error(zone_name):
        return value
    return value.replace(tzinfo=ZoneInfo(zone_name))


@extend_schema_field(
    {
        "type": "number",
        "format": "double",
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": RETRY_BACKOFF_MAX,
    }
)
class BackoffField(StrictFloatField):
    """Seconds, more than 0 and at most RETRY_BACKOFF_MAX. (No DRF min_value: it is inclusive,
    and drf-spectacular would drop the schema's exclusiveMinimum for it.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            max_value=RETRY_BACKOFF_MAX, error_messages={"max_value": RETRY_BACKOFF_MESSAGE}, **kwargs
        )

    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if value <= 0:
            raise serializers.ValidationError(RETRY_BACKOFF_MESSAGE)
        return value


def _ranged(low: int, high: int) -> dict[str, Any]:
    """A whole number's bounds, with the job service's message for both."""
    message = range_message(low, high)
    return {
        "min_value": low,
        "max_value": high,
        "error_messages": {"min_value": message, "max_value": message},
    }


YEARS = f"Years {YEAR_MIN} to {YEAR_MAX}."


class JobWriteSerializer(ClosedSerializer):
    """A job as a client sends it. On create `name` and `workflow` are required; on PATCH every
    field is optional and only the fields sent change. Any other field is refused."""

    name = StrictCharField(
        max_length=200,
        validators=[control_characters_refuse],
        help_text="Unique among your jobs; no control characters (line breaks, tabs...).",
    )
    workflow = StrictCharField(
        max_length=100,
        help_text="A registered workflow's name that you may schedule: customers may schedule "
        "`order_fulfilment` and `http.call`; every other workflow and `task:*` is staff-only "
        "work, for holders of the staff-work permission (the Operators role) only; "
        "`webhook_delivery` and `alert_webhook` are never jobs (400 on `workflow` otherwise).",
    )
    input = serializers.DictField(
        required=False, help_text="The workflow's input (a JSON object), checked by the workflow."
    )
    recurring = StrictBooleanField(
        required=False,
        help_text="true: runs on `cron`, which must then not be empty; false: runs once (at `run_at`). "
        "Default on create: true when `cron` is given; on edit: the job's kind.",
    )
    cron = StrictCharField(
        required=False,
        allow_blank=True,
        max_length=100,
        help_text="Five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, "
        "@weekly, @monthly, @yearly; empty for a one-off job.",
    )
    timezone = StrictCharField(
        required=False,
        max_length=64,
        help_text="IANA time zone the cron expression is read in (default UTC).",
    )
    run_at = JobTimeField(
        required=False,
        allow_null=True,
        help_text="One-off job: when it runs (null: now). Without an offset: in the job's time zone. "
        f"{YEARS}",
    )
    start_at = JobTimeField(
        required=False,
        allow_null=True,
        help_text=f"No run before this (without an offset: the job's zone). {YEARS}",
    )
    end_at = JobTimeField(
        required=False,
        allow_null=True,
        help_text=f"No run after this (without an offset: the job's zone). {YEARS}",
    )
    max_firings = StrictIntegerField(
        required=False,
        allow_null=True,
        **_ranged(1, MAX_FIRINGS_MAX),
        help_text="Stop after this many scheduled runs (null: no limit).",
    )
    overlap_policy = serializers.ChoiceField(
        choices=OverlapPolicy.choices,
        required=False,
        help_text="What an occurrence does while the job's previous run is still going.",
    )
    catchup_window = StrictFloatField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=CATCHUP_WINDOW_MAX.total_seconds(),
        error_messages={"min_value": CATCHUP_WINDOW_MESSAGE, "max_value": CATCHUP_WINDOW_MESSAGE},
        help_text="Seconds: after downtime, occurrences missed within this window still run "
        "(null: only the latest missed one).",
    )
    jitter = StrictIntegerField(
        required=False,
        **_ranged(0, JITTER_MAX),
        help_text="Seconds: each occurrence starts up to this later (less than the time between "
        "occurrences).",
    )
    max_retry = StrictIntegerField(
        required=False,
        **_ranged(0, MAX_RETRY_MAX),
        help_text="Retries of an occurrence whose run failed or was compensated.",
    )
    retry_backoff = BackoffField(
        required=False, help_text="Seconds before the first retry; doubles each retry (at most 1 h)."
    )
    priority = StrictIntegerField(
        required=False,
        min_value=CUSTOMER_PRIORITY_MIN,
        max_value=CUSTOMER_PRIORITY_MAX,
        error_messages={"min_value": PRIORITY_RANGE, "max_value": PRIORITY_RANGE},
        help_text=f"Higher runs first: {CUSTOMER_PRIORITY_MIN} to {CUSTOMER_PRIORITY_MAX} (default "
        f"{CUSTOMER_PRIORITY_DEFAULT}), below all system work (orders, exports: 0; webhook deliveries: -1).",
    )
    idempotent = StrictBooleanField(
        required=False, help_text="false: two runs of this job never overlap, whatever the policy."
    )

    parents = serializers.JSONField(
        required=False,
        help_text='The jobs this one waits for: [{"job": <id>, "condition": "on_success" | "on_failure" | '
        '"on_either"}] (condition: on_success when left out). Replaces the job\'s parents on an edit '
        "(left out: unchanged). Your own jobs only; no cycle. A one-off job with parents and no run_at "
        "runs only when they end, for their occurrence's time.",
    )

    def to_service(self, *, create: bool = False, job_zone: str = "UTC") -> dict[str, Any]:
        """The validated fields as the job service's keywords (only those sent, on an edit).
        Times without an offset are read in the zone sent, else `job_zone` (the job's)."""
        data = dict(self.validated_data)
        zone = str(data.get("timezone") or job_zone)
        for name in ("run_at", "start_at", "end_at"):
            if name in data:
                data[name] = in_zone(data[name], zone)
        if create:
            data.setdefault("input", {})
        # Switching kind: the other kind's field goes unless it was sent (then the service says).
        if data.get("recurring") is False:
            data.setdefault("cron", "")
        elif data.get("recurring") is True:
            data.setdefault("run_at", None)
        if "timezone" in data:
            data["timezone_name"] = data.pop("timezone")
        if data.get("catchup_window") is not None:
            data["catchup_window"] = timedelta(seconds=data["catchup_window"])
        if "cron" in data:
            data["cron"] = data["cron"].strip()
        return data


class LastRunSerializer(serializers.Serializer[dict[str, Any]]):
    state = serializers.ChoiceField(choices=RunState.choices)
    at = serializers.DateTimeField()


class JobEdgeSerializer(serializers.Serializer[dict[str, Any]]):
    job = serializers.IntegerField(help_text="The other job's id.")
    name = serializers.CharField()
    condition = serializers.ChoiceField(choices=DependencyCondition.choices)
    last_outcome = serializers.CharField(
        allow_blank=True,
        help_text="succeeded, failed or cancelled: the parent's last occurrence this edge saw.",
    )
    last_logical_time = serializers.DateTimeField(allow_null=True)
    last_matched = serializers.BooleanField(allow_null=True, help_text="Whether it matched the condition.")


class JobSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    url = serializers.URLField()
    name = serializers.CharField()
    state = serializers.ChoiceField(choices=JOB_STATES, help_text="active, paused or finished.")
    workflow = serializers.CharField()
    input = serializers.DictField()
    recurring = serializers.BooleanField()
    cron = serializers.CharField()
    timezone = serializers.CharField()
    schedule_text = serializers.CharField(help_text="The schedule in words.")
    run_at = serializers.DateTimeField(allow_null=True)
    start_at = serializers.DateTimeField(allow_null=True)
    end_at = serializers.DateTimeField(allow_null=True)
    max_firings = serializers.IntegerField(allow_null=True)
    firing_count = serializers.IntegerField(
        allow_null=True,
        help_text="Scheduled occurrences started or buffered so far, toward max_firings; "
        "null for a job without max_firings (not counted).",
    )
    overlap_policy = serializers.ChoiceField(choices=OverlapPolicy.choices)
    catchup_window = serializers.FloatField(allow_null=True, help_text="Seconds.")
    jitter = serializers.IntegerField()
    max_retry = serializers.IntegerField()
    retry_backoff = serializers.FloatField(help_text="Seconds.")
    priority = serializers.IntegerField()
    idempotent = serializers.BooleanField()
    paused_note = serializers.CharField()
    paused_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    next_run_at = serializers.DateTimeField(
        allow_null=True, help_text="When it runs next (null: not scheduled)."
    )
    last_run = LastRunSerializer(allow_null=True, help_text="The newest run's state and start.")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    # A job's own page only (not in the list).
    parents = JobEdgeSerializer(many=True, required=False, help_text="The jobs this one waits for.")
    children = JobEdgeSerializer(many=True, required=False, help_text="The jobs that wait for this one.")


class PauseSerializer(ClosedSerializer):
    note = StrictCharField(
        required=False, allow_blank=True, max_length=2000, help_text="Why (shown on the job)."
    )


class BackfillSerializer(ClosedSerializer):
    start = JobTimeField(
        help_text=f"First occurrence time to consider (inclusive; without an offset: the job's zone). {YEARS}"
    )
    end = JobTimeField(
        help_text="Last occurrence time to consider (inclusive), in the past "
        f"(without an offset: the job's zone). {YEARS}"
    )
    dependents = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also run the jobs that wait for this one, for each backfilled occurrence, as its "
        "scheduled occurrences do (default: the backfill runs this job only).",
    )


class BackfillResultSerializer(serializers.Serializer[dict[str, Any]]):
    queued = serializers.ListField(child=serializers.DateTimeField(), help_text="Occurrences queued now.")
    already = serializers.ListField(
        child=serializers.DateTimeField(), help_text="Occurrences that had run or were queued already."
    )


class FiringSerializer(serializers.Serializer[dict[str, Any]]):
    outcome = serializers.ChoiceField(
        choices=[("started", "started"), ("buffered", "buffered"), ("skipped", "skipped")],
        help_text="started: a run began; buffered: it starts when the running one ends; "
        "skipped: the overlap policy refused it.",
    )
    run_id = serializers.UUIDField(allow_null=True)
    scheduled_for = serializers.DateTimeField(allow_null=True)
    reason = serializers.CharField(allow_blank=True)


class JobRunSerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.UUIDField()
    state = serializers.ChoiceField(
        choices=RunState.choices,
        help_text="The engine's state. A run that failed with nothing to undo is `compensated` here "
        "(its undo phase ran, with nothing in it); `outcome` says what people read.",
    )
    outcome = serializers.ChoiceField(
        choices=RunState.choices,
        source="shown_state",
        help_text="How the run ended as the pages show it (scheduler/outcomes.py): `failed` where it "
        "failed with nothing to undo, `compensated` only where some step was undone; otherwise `state`.",
    )
    reason = serializers.CharField(
        allow_blank=True,
        help_text="Why it failed, in a sentence (`error` is the engine's text, for operators and support).",
    )
    scheduled_for = serializers.DateTimeField(allow_null=True, help_text="The occurrence it is a run of.")
    attempt = serializers.IntegerField(help_text="0: first run of the occurrence; n: its n-th retry.")
    error = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    outputs = StepOutputSerializer(
        many=True,
        help_text="What its forward steps returned, in order: a task's return value, an HTTP call's "
        "status, headers and body excerpt (bounded; `download_url` has the whole output).",
    )


class JobHistorySerializer(serializers.Serializer[dict[str, Any]]):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=HistoryStatus.choices)
    scheduled_for = serializers.DateTimeField(allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    retry_count = serializers.IntegerField()
    worker = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(
        allow_blank=True,
        help_text="Why it was started, skipped or buffered; on an operator row (status action): "
        "paused, resumed or edited (who: worker; the note or the changed fields: detail).",
    )
    detail = serializers.DictField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)


class WindowTimeField(serializers.Field[datetime, str, str, Any]):
    """An ISO 8601 date and time for the preview's window, as the job form's fields send it: with
    an offset it is that instant; without one it is read later in the query's time zone (the
    job's), so it stays naive here. Empty: none."""

    def to_internal_value(self, data: Any) -> datetime | None:
        if data in ("", None):
            return None
        try:
            value = parse_datetime(data) if isinstance(data, str) else None
        except ValueError:  # well formed, but no such date (month 13)
            value = None
        if value is None:
            raise serializers.ValidationError("must be a date and time, e.g. 2026-12-01T09:00")
        return value

    def to_representation(self, value: datetime) -> str:
        return value.isoformat()


class PreviewQuerySerializer(serializers.Serializer[dict[str, Any]]):
    cron = serializers.CharField(allow_blank=True, max_length=100, help_text="The cron expression to try.")
    timezone = serializers.CharField(required=False, default="UTC", max_length=64)
    count = serializers.IntegerField(required=False, default=5, min_value=1, max_value=50)
    start_at = WindowTimeField(required=False, default=None, help_text="The job's 'not before'.")
    end_at = WindowTimeField(required=False, default=None, help_text="The job's 'not after'.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # Times without an offset are the job's wall clock, as the form types them.
        zone_name = attrs.get("timezone") or "UTC"
        if zone_error(zone_name):
            return attrs  # the service names the bad zone
        zone = ZoneInfo(zone_name)
        for field in ("start_at", "end_at"):
            value = attrs.get(field)
            if value is not None and value.tzinfo is None:
                attrs[field] = value.replace(tzinfo=zone)
        return attrs


class PreviewSerializer(serializers.Serializer[dict[str, Any]]):
    cron = serializers.CharField()
    timezone = serializers.CharField()
    schedule_text = serializers.CharField()
    times = serializers.ListField(
        child=LocalDateTimeField(), help_text="The next fire times, in the job's time zone."
    )

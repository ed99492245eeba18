"""The report's JSON shape, for drf-spectacular's schema and the API's output."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from scheduler.models import RunState

from .selectors import MISSED_KINDS, OUTCOMES


def _counts(names: tuple[str, ...], help_text: str) -> type[serializers.Serializer]:
    fields = {name: serializers.IntegerField() for name in names}
    return type(f"{help_text}Serializer", (serializers.Serializer,), fields)


OutcomesSerializer = _counts(OUTCOMES, "Outcomes")
MissedSerializer = _counts(MISSED_KINDS, "MissedDeadlines")


class FiguresSerializer(serializers.Serializer):
    runs = serializers.IntegerField(help_text="Runs submitted in the window.")
    outcomes = OutcomesSerializer(
        help_text="Runs by their state now; in_progress = pending, running or compensating."
    )
    success_rate = serializers.FloatField(
        allow_null=True, help_text="completed / (completed + compensated + failed); null when none of those."
    )
    finished = serializers.IntegerField(help_text="Runs that have finished (the durations' sample).")
    duration_p50_seconds = serializers.FloatField(
        allow_null=True, help_text="Nearest-rank median of submit-to-final-state time of finished runs."
    )
    duration_p95_seconds = serializers.FloatField(allow_null=True, help_text="Nearest-rank 95th percentile.")
    retries = serializers.IntegerField(help_text="Attempts that were not their step's first.")
    missed_deadlines = serializers.IntegerField(help_text="Sum of missed_deadlines_by_kind.")
    missed_deadlines_by_kind = MissedSerializer(
        help_text=(
            "attempt_start: attempts no agent started by their start-by; attempt_complete: attempts with no "
            "reply by their complete-by; step_close: steps that gave up at their whole-step deadline; run: "
            "runs that finished after (or are still going past) their deadline."
        )
    )


@extend_schema_serializer(component_name="ReportLastRun")  # jobs/serializers.py has a "LastRun"
class ReportLastRunSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    at = serializers.DateTimeField()
    state = serializers.ChoiceField(choices=RunState.choices)


# Its own component names: jobs/serializers.py's are "Job" and "LastRun" in the schema
# (drf_spectacular.W001, issue 19: `check --deploy` warned).
@extend_schema_serializer(component_name="ReportJob")
class ReportJobSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    schedule = serializers.CharField(allow_null=True, help_text="Cron expression; null for a one-off job.")
    timezone = serializers.CharField()
    enabled = serializers.BooleanField()
    last_run = ReportLastRunSerializer(allow_null=True, help_text="The job's latest run, whenever it was.")
    next_run_at = serializers.DateTimeField(allow_null=True)


class ReportRowSerializer(FiguresSerializer):
    label = serializers.CharField()
    workflow = serializers.CharField()
    job = ReportJobSerializer(
        allow_null=True, help_text="Null for runs no job produced (orders), one row per workflow."
    )


class BucketSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    runs = serializers.IntegerField()
    outcomes = OutcomesSerializer()
    finished = serializers.IntegerField()
    duration_p50_seconds = serializers.FloatField(allow_null=True)
    duration_p95_seconds = serializers.FloatField(allow_null=True)


class ReportUserSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class WindowSerializer(serializers.Serializer):
    name = serializers.ChoiceField(choices=["hour", "day", "week", "custom"])
    start = serializers.DateTimeField(help_text="Inclusive.")
    end = serializers.DateTimeField(help_text="Exclusive.")
    tz = serializers.CharField()
    bucket_seconds = serializers.IntegerField(help_text="Width of each bucket (300, 3600 or 86400).")


class ReportSerializer(serializers.Serializer):
    user = ReportUserSerializer()
    window = WindowSerializer()
    generated_at = serializers.DateTimeField()
    total = FiguresSerializer(help_text="All the user's runs in the window (jobs and orders).")
    rows = ReportRowSerializer(many=True)
    buckets = BucketSerializer(many=True)

"""The engine's API answers as DRF serializers, so the OpenAPI schema (drf-spectacular) says what
they hold: a step's output (scheduler/outputs.py) and a run's progress."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from .models import RunState


class StepOutputSerializer(serializers.Serializer[dict[str, Any]]):
    step = serializers.CharField(help_text="The step's name in its workflow.")
    label = serializers.CharField(help_text="The step's label, as the pages show it.")
    kind = serializers.ChoiceField(
        choices=[("value", "A task's return value"), ("http", "An HTTP answer")],
        help_text="value: a task's return value (JSON); http: an HTTP call's answer.",
    )
    status = serializers.IntegerField(allow_null=True, help_text="http: the answer's status code.")
    headers = serializers.DictField(
        child=serializers.CharField(),
        allow_null=True,
        help_text="http: the answer's headers among content-type, content-length, location, "
        "retry-after, etag, last-modified and date (names in lower case).",
    )
    value = serializers.JSONField(
        allow_null=True,
        help_text="value: the return value itself when it is whole (not truncated); null otherwise "
        "(read `excerpt`, or download it).",
    )
    excerpt = serializers.CharField(
        allow_blank=True,
        help_text="The body (http) or the value's JSON text, cut to SAS_OUTPUT_EXCERPT_BYTES "
        "(2048 by default) bytes of UTF-8.",
    )
    truncated = serializers.BooleanField(help_text="The excerpt is cut: `download_url` has all of it.")
    size = serializers.IntegerField(help_text="Bytes (UTF-8) of the whole stored output.")
    source_truncated = serializers.BooleanField(
        help_text="The agent kept only the beginning of a longer answer (http: "
        "SAS_HTTP_JOB_RESPONSE_MAX_BYTES) or return value (16 KiB)."
    )
    download_url = serializers.CharField(
        help_text="The whole stored output as a file (its owner only; application/json or text/plain)."
    )


class RunProgressSerializer(serializers.Serializer[dict[str, Any]]):
    run_id = serializers.UUIDField()
    workflow = serializers.CharField()
    state = serializers.ChoiceField(choices=RunState.choices)
    state_label = serializers.CharField()
    terminal = serializers.BooleanField(help_text="The run has ended (nothing more will change).")
    steps_done = serializers.IntegerField(help_text="Forward steps done.")
    steps_total = serializers.IntegerField(help_text="Forward steps in all.")
    paged = serializers.DictField(
        allow_null=True,
        help_text="Paginated steps (summed): pages_done, pages_total, rows_done, rows_total, "
        "page_size, percent, rows_per_second, eta_seconds, completed, started_at, updated_at.",
    )
    heartbeats = serializers.ListField(
        child=serializers.DictField(),
        help_text="Heartbeat steps: step, status, status_label, heartbeats, last_heartbeat_at, "
        "seconds_since_heartbeat, worker, complete_by.",
    )
    error = serializers.CharField(allow_blank=True, help_text="Why the run failed, when it did.")
    outputs = StepOutputSerializer(many=True, help_text="What its forward steps returned, in order.")

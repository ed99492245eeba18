"""API shapes for customers' alert rules: the request's JSON types and ranges field by field, and
unknown fields refused (ClosedSerializer), so the schema declares what the API takes. The rules
that depend on the rule's kind (the threshold's range), the job's owner and the webhook URL's
policy are alerting.customer's, and its errors come back under the same field names."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from alerting.models import CUSTOMER_RULE_KINDS
from sasproject.api_input import (
    ClosedSerializer,
    StrictBooleanField,
    StrictCharField,
    StrictFloatField,
    StrictIntegerField,
)
from sasproject.names import control_characters_refuse

from .customer import MIN_RUNS_LIMITS, WINDOW_MINUTES_LIMITS

JOB_ID_MAX = 2**63 - 1


class AlertRuleWriteSerializer(ClosedSerializer):
    job = StrictIntegerField(min_value=1, max_value=JOB_ID_MAX, help_text="One of your jobs.")
    kind = serializers.ChoiceField(choices=[(k.value, k.label) for k in CUSTOMER_RULE_KINDS])
    threshold = StrictFloatField(
        help_text="job_failure_rate: a fraction 0.01 to 1; job_consecutive_failures: runs, 1 to "
        "100; job_missed_runs: seconds late, 60 to 604800."
    )
    min_runs = StrictIntegerField(min_value=MIN_RUNS_LIMITS[0], max_value=MIN_RUNS_LIMITS[1], required=False)
    window_minutes = StrictIntegerField(
        min_value=WINDOW_MINUTES_LIMITS[0], max_value=WINDOW_MINUTES_LIMITS[1], required=False
    )
    notify_email = StrictBooleanField(required=False, help_text="E-mail your account's address.")
    webhook_url = StrictCharField(
        max_length=500,
        allow_blank=True,
        required=False,
        help_text="An https:// URL on the public internet (http:// is refused); deliveries are "
        "signed and carry an event id (X-SAS-Event-Id).",
    )
    name = StrictCharField(
        max_length=100,
        allow_blank=True,
        required=False,
        validators=[control_characters_refuse],
        help_text="Shown in the alert and its e-mails' subject; no control characters.",
    )


class AlertRuleQuerySerializer(serializers.Serializer[dict[str, Any]]):
    """`GET ?job=`: a whole number in the id range (a query string is text, so not strict)."""

    job = serializers.IntegerField(
        min_value=1, max_value=JOB_ID_MAX, required=False, help_text="Only the rules on this job of yours."
    )


class AlertRuleSerializer(serializers.Serializer[dict[str, Any]]):
    """The document alerting.customer.customer_rule_document writes (for the schema)."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    job = serializers.IntegerField()
    kind = serializers.CharField()
    threshold = serializers.FloatField()
    min_runs = serializers.IntegerField()
    window_minutes = serializers.IntegerField()
    notify_email = serializers.BooleanField()
    webhook_url = serializers.CharField()
    firing = serializers.BooleanField()
    message = serializers.CharField()


class AlertRuleListSerializer(serializers.Serializer[dict[str, Any]]):
    results = AlertRuleSerializer(many=True)

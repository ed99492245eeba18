"""Customers' alert rules over the JSON API: `GET/POST /api/alert-rules/`, `GET/DELETE
/api/alert-rules/<id>/` (token or session auth, like the jobs API). Another customer's rule or
job answers 404 / a 400 naming `job`; bad input a 400 naming the field, nothing written."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from alerting.models import AlertRule
from sasproject.tokens.authentication import HashedTokenAuthentication

from .customer import (
    AlertRuleInputError,
    CustomerRuleInput,
    customer_rule_create,
    customer_rule_delete,
    customer_rule_document,
    customer_rule_get,
    customer_rules,
)
from .serializers import (
    AlertRuleListSerializer,
    AlertRuleQuerySerializer,
    AlertRuleSerializer,
    AlertRuleWriteSerializer,
)

FIELD_ERRORS = OpenApiResponse(
    OpenApiTypes.OBJECT,
    description='Field errors: {"field": ["message"]} (another user\'s job is "no such job of yours"). '
    "Nothing was written.",
)
RULE_ID = OpenApiParameter("rule_id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The rule id.")


@extend_schema(
    methods=["GET"],
    operation_id="alert_rules_list",
    summary="Your alert rules, oldest first (on one job of yours with ?job=)",
    parameters=[AlertRuleQuerySerializer],
    responses={200: AlertRuleListSerializer, 400: FIELD_ERRORS},
)
@extend_schema(
    methods=["POST"],
    operation_id="alert_rules_create",
    summary="Create an alert rule on one of your jobs (e-mail to your address and/or a signed webhook)",
    request=AlertRuleWriteSerializer,
    responses={201: AlertRuleSerializer, 400: FIELD_ERRORS},
)
@api_view(["GET", "POST"])
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def alert_rules_view(request: Request) -> Response:
    owner_id = int(request.user.pk)
    if request.method == "GET":
        query = AlertRuleQuerySerializer(data=request.query_params)
        if not query.is_valid():
            return Response(query.errors, status=status.HTTP_400_BAD_REQUEST)
        rules = customer_rules(owner_id=owner_id, job_id=query.validated_data.get("job"))
        return Response({"results": [customer_rule_document(r) for r in rules]})
    serializer = AlertRuleWriteSerializer(data=request.data)
    if not serializer.is_valid():
        return Response(serializer.errors, status=status.HTTP_400_BAD_REQUEST)
    body: dict[str, Any] = dict(serializer.validated_data)
    data = CustomerRuleInput(
        job_id=body.get("job"),
        kind=body.get("kind"),
        threshold=body.get("threshold"),
        min_runs=body.get("min_runs", 1),
        window_minutes=body.get("window_minutes", 60),
        notify_email=body.get("notify_email", True),
        webhook_url=body.get("webhook_url", ""),
        name=body.get("name", ""),
    )
    try:
        rule = customer_rule_create(owner_id=owner_id, data=data)
    except AlertRuleInputError as error:
        return Response(error.errors, status=status.HTTP_400_BAD_REQUEST)
    return Response(customer_rule_document(rule), status=status.HTTP_201_CREATED)


@extend_schema(
    methods=["GET"],
    operation_id="alert_rules_retrieve",
    summary="One of your alert rules, and whether it is firing",
    parameters=[RULE_ID],
    responses={200: AlertRuleSerializer},
)
@extend_schema(
    methods=["DELETE"],
    operation_id="alert_rules_destroy",
    summary="Delete one of your alert rules (its alerts go with it)",
    parameters=[RULE_ID],
    responses={204: None},
)
@api_view(["GET", "DELETE"])
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def alert_rule_view(request: Request, rule_id: int) -> Response:
    owner_id = int(request.user.pk)
    try:
        if request.method == "DELETE":
            customer_rule_delete(owner_id=owner_id, rule_id=rule_id)
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(customer_rule_document(customer_rule_get(owner_id=owner_id, rule_id=rule_id)))
    except AlertRule.DoesNotExist:
        raise NotFound from None

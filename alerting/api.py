"""Customers' alert rules over the JSON API: `GET/POST /api/alert-rules/`, `GET/DELETE
/api/alert-rules/<id>/` (token or session auth, like the jobs API). Another customer's rule or
job answers 404 / a 400 naming `job`; bad input a 400 naming the field, nothing written."""

from __future__ import annotations

from typing import Any

from rest_framework import status
from rest_framework.authentication import SessionAuthentication, TokenAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from supervisor.models import AlertRule

from .customer import (
    AlertRuleInputError,
    CustomerRuleInput,
    customer_rule_create,
    customer_rule_delete,
    customer_rule_document,
    customer_rule_get,
    customer_rules,
)

_FIELDS = ("job", "kind", "threshold", "min_runs", "window_minutes", "notify_email", "webhook_url", "name")


@api_view(["GET", "POST"])
@authentication_classes([TokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def alert_rules_view(request: Request) -> Response:
    owner_id = int(request.user.pk)
    if request.method == "GET":
        return Response({"results": [customer_rule_document(r) for r in customer_rules(owner_id=owner_id)]})
    body: Any = request.data
    if not isinstance(body, dict):
        return Response(
            {"non_field_errors": ["a JSON object is expected"]}, status=status.HTTP_400_BAD_REQUEST
        )
    unknown = sorted(set(body) - set(_FIELDS))
    if unknown:
        return Response({k: ["unknown field"] for k in unknown}, status=status.HTTP_400_BAD_REQUEST)
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


@api_view(["GET", "DELETE"])
@authentication_classes([TokenAuthentication, SessionAuthentication])
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

"""The orders JSON API (Django REST framework). Views are thin: they parse, call a selector or a
service, and map the service's exceptions to HTTP statuses."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, status, viewsets
from rest_framework.decorators import action, api_view, permission_classes, throttle_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.throttling import BaseThrottle

from scheduler.models import Run
from scheduler.services import RunNotCancellable
from scheduler.throttles import ScopeThrottle
from webhooks.services import webhook_secret_get_or_create, webhook_secret_rotate
from webhooks.signing import ALGORITHM, HEADER_FORMAT, SIGNATURE_HEADER, SIGNED_PAYLOAD

from .models import Order
from .selectors import OrderStatus, order_get, order_list, order_status
from .serializers import (
    ErrorSerializer,
    IdempotencyConflictSerializer,
    OrderCreateSerializer,
    OrderDetailSerializer,
    OrderSerializer,
    WebhookSecretSerializer,
)
from .services import IdempotencyKeyReused, order_cancel, order_submit, order_submit_idempotent

IDEMPOTENCY_HEADER = "Idempotency-Key"


def _order_url(request: Request, order: Order) -> str:
    return str(reverse("api-order-detail", args=[str(order.pk)], request=request))


def _order_summary(request: Request, order: Order) -> dict[str, Any]:
    return {
        "id": str(order.pk),
        "state": order.run.state,
        "url": _order_url(request, order),
        "created_at": order.created_at,
        "items": order.items,
        "amount": order.amount_display,
        "currency": order.currency,
        "callback_url": order.callback_url,
    }


def _order_detail(request: Request, status_: OrderStatus) -> dict[str, Any]:
    return {**_order_summary(request, status_.order), **status_.as_dict(raw_errors=True)}


ORDER_ID = OpenApiParameter("id", OpenApiTypes.UUID, OpenApiParameter.PATH, description="The order id.")
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="No such order for this user.")


@extend_schema_view(
    list=extend_schema(
        summary="Your orders, newest first",
        parameters=[
            OpenApiParameter(
                "state", str, enum=Run.State.values, description="Only orders whose run is in this state."
            )
        ],
        responses={200: OrderSerializer(many=True), 400: OpenApiResponse(description="Unknown state.")},
    ),
    retrieve=extend_schema(
        summary="An order: state, steps and event log",
        parameters=[ORDER_ID],
        responses={200: OrderDetailSerializer, 404: NOT_FOUND},
    ),
    create=extend_schema(
        summary="Place an order",
        request=OrderCreateSerializer,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                str,
                OpenApiParameter.HEADER,
                description="Makes a retried POST return the first order (200) instead of creating another.",
            )
        ],
        responses={
            201: OrderSerializer,
            200: OpenApiResponse(
                OrderSerializer, description="Replay of an Idempotency-Key: the first order."
            ),
            400: OpenApiResponse(description="Field errors: {field: [messages]}."),
            413: ErrorSerializer,
            422: OpenApiResponse(
                IdempotencyConflictSerializer, description="Idempotency-Key reused with another body."
            ),
            429: ErrorSerializer,
        },
    ),
)
class OrderViewSet(viewsets.GenericViewSet):
    """Orders of the authenticated user."""

    permission_classes = [IsAuthenticated]
    lookup_value_regex = "[^/]+"
    # For the schema only; every read goes through the user-scoped selectors.
    queryset = Order.objects.none()
    serializer_class = OrderSerializer

    def get_throttles(self) -> list[BaseThrottle]:
        # Orders per user, web and API together (scope "order_submit" of settings.SAS_RATES).
        if getattr(self, "action", None) == "create":
            return [ScopeThrottle.of("order_submit")]
        return []

    def _queryset(self, request: Request) -> QuerySet[Order]:
        state = request.query_params.get("state")
        if state is not None and state not in Run.State.values:
            raise exceptions.ValidationError({"state": [f"must be one of {', '.join(Run.State.values)}"]})
        return order_list(user=request.user, state=state or None)

    def list(self, request: Request) -> Response:
        page = self.paginate_queryset(self._queryset(request)) or []
        return self.get_paginated_response(
            OrderSerializer([_order_summary(request, o) for o in page], many=True).data
        )

    def retrieve(self, request: Request, pk: str | None = None) -> Response:
        try:
            found = order_status(user=request.user, order_id=pk or "")
        except Order.DoesNotExist:
            raise exceptions.NotFound("No such order.") from None
        return Response(OrderDetailSerializer(_order_detail(request, found)).data)

    def create(self, request: Request) -> Response:
        serializer = OrderCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data, callback_url = serializer.to_order_data()
        key = request.headers.get(IDEMPOTENCY_HEADER)
        owner_id = request.user.pk
        if key is None:
            order = order_submit(owner_id=owner_id, data=data, callback_url=callback_url)
            created = True
        else:
            if not 1 <= len(key) <= 255:
                raise exceptions.ValidationError({IDEMPOTENCY_HEADER: ["must be 1 to 255 characters"]})
            try:
                result = order_submit_idempotent(
                    owner_id=owner_id, data=data, idempotency_key=key, callback_url=callback_url
                )
            except IdempotencyKeyReused as exc:
                return Response(
                    {"detail": str(exc), "order_id": str(exc.order.pk)},
                    status=status.HTTP_422_UNPROCESSABLE_ENTITY,
                )
            order, created = result.order, result.created
        order = Order.objects.select_related("run").get(pk=order.pk)
        body = OrderSerializer(_order_summary(request, order)).data
        return Response(
            body,
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
            headers={"Location": body["url"]},
        )

    @extend_schema(
        summary="Cancel an order that has not finished; completed steps are compensated",
        request=None,
        parameters=[ORDER_ID],
        responses={200: OrderDetailSerializer, 404: NOT_FOUND, 409: ErrorSerializer},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        try:
            order = order_get(user=request.user, order_id=pk or "")
        except Order.DoesNotExist:
            raise exceptions.NotFound("No such order.") from None
        try:
            order_cancel(order=order, actor=f"user {request.user.get_username()} (api)")
        except RunNotCancellable as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        found = order_status(user=request.user, order_id=order.pk)
        return Response(OrderDetailSerializer(_order_detail(request, found)).data)


def _secret_body(secret: str) -> dict[str, Any]:
    # The signer's own words (webhooks/signing.py): the signature covers "<t>.<raw body>".
    return {
        "secret": secret,
        "algorithm": ALGORITHM,
        "header": SIGNATURE_HEADER,
        "header_format": HEADER_FORMAT,
        "signed_payload": SIGNED_PAYLOAD,
        "tolerance_seconds": settings.SAS_WEBHOOK_SIGNATURE_TOLERANCE,
    }


@extend_schema(summary="Your webhook signing secret", responses={200: WebhookSecretSerializer})
@api_view(["GET"])
@permission_classes([IsAuthenticated])
@throttle_classes([])
def webhook_secret(request: Request) -> Response:
    return Response(_secret_body(webhook_secret_get_or_create(user_id=request.user.pk).secret))


@extend_schema(
    summary="Replace your webhook signing secret", request=None, responses={200: WebhookSecretSerializer}
)
@api_view(["POST"])
@permission_classes([IsAuthenticated])
def webhook_secret_rotate_view(request: Request) -> Response:
    return Response(_secret_body(webhook_secret_rotate(user_id=request.user.pk).secret))

"""The API token over the API: see it (never its key), rotate it (the new key in the answer,
once), revoke it. Token or session (DRF asks the session's writes for their CSRF token)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response

from .authentication import HashedTokenAuthentication
from .models import ApiToken
from .services import api_token_of, api_token_revoke, api_token_rotate

_TOKEN = inline_serializer(
    "ApiToken",
    {
        "prefix": serializers.CharField(help_text="The key's first characters, to recognise it."),
        "created_at": serializers.DateTimeField(),
        "expires_at": serializers.DateTimeField(),
        "expired": serializers.BooleanField(),
    },
)
_NEW_TOKEN = inline_serializer(
    "ApiTokenNew",
    {
        "key": serializers.CharField(help_text="The new key. Shown this once: it is stored hashed."),
        "prefix": serializers.CharField(),
        "created_at": serializers.DateTimeField(),
        "expires_at": serializers.DateTimeField(),
    },
)


def _describe(token: ApiToken) -> dict[str, Any]:
    return {
        "prefix": token.prefix,
        "created_at": token.created_at,
        "expires_at": token.expires_at,
        "expired": token.expired,
    }


@extend_schema(
    methods=["GET"],
    summary="Your API token: its first characters, creation and expiry (never the key)",
    responses={200: _TOKEN, 404: OpenApiResponse(description="You have no API token.")},
)
@extend_schema(
    methods=["DELETE"],
    summary="Revoke your API token: it stops working at once",
    request=None,
    responses={204: None, 404: OpenApiResponse(description="You have no API token.")},
)
@api_view(["GET", "DELETE"])
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def api_token_view(request: Request) -> Response:
    if request.method == "DELETE":
        if not api_token_revoke(user_id=request.user.pk):
            raise exceptions.NotFound("You have no API token.")
        return Response(status=status.HTTP_204_NO_CONTENT)
    token = api_token_of(user_id=request.user.pk)
    if token is None:
        raise exceptions.NotFound("You have no API token.")
    response = Response(_describe(token))
    response["Cache-Control"] = "no-store"
    return response


@extend_schema(
    summary="Replace your API token: the answer holds the new key, once; the old key stops working",
    request=None,
    responses={201: _NEW_TOKEN},
)
@api_view(["POST"])
@authentication_classes([HashedTokenAuthentication, SessionAuthentication])
@permission_classes([IsAuthenticated])
def api_token_rotate_view(request: Request) -> Response:
    issued = api_token_rotate(user_id=request.user.pk)
    body = {"key": issued.key, **_describe(issued.token)}
    body.pop("expired")
    response = Response(body, status=status.HTTP_201_CREATED)
    response["Cache-Control"] = "no-store"
    return response

"""`Authorization: Token <key>` against the hashed tokens. The API's first authentication class
everywhere: DRF answers an anonymous request 401 with `WWW-Authenticate: Token` only when the
first class names a challenge (SessionAuthentication names none, and the answer was 403)."""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.authentication import TokenAuthentication

from .services import api_token_find


class HashedTokenAuthentication(TokenAuthentication):
    keyword = "Token"

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        token = api_token_find(key=key)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if token.expired:
            raise exceptions.AuthenticationFailed(
                f"Token expired on {token.expires_at:%Y-%m-%d}: make a new one on the API token page "
                "(/account/api-token/)."
            )
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return (token.user, token)

"""Make, rotate, revoke and find API tokens. The key leaves this module once, from
api_token_rotate; afterwards only its digest exists."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import ApiToken

PREFIX_LENGTH = 8
# Keys longer than this are no key of ours: refused before hashing.
KEY_MAX_LENGTH = 100


@dataclass(frozen=True)
class IssuedToken:
    """A new token: `key` is the only copy there will ever be."""

    key: str
    token: ApiToken


def token_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def api_token_rotate(*, user_id: int) -> IssuedToken:
    """A new key for the user, replacing any token it had (the old key stops working at once);
    it expires after settings.SAS_API_TOKEN_DAYS days."""
    key = secrets.token_hex(20)  # 40 hex characters, the shape clients already know
    now = timezone.now()
    with transaction.atomic():
        token, _ = ApiToken.objects.update_or_create(
            user_id=user_id,
            defaults={
                "digest": token_digest(key),
                "prefix": key[:PREFIX_LENGTH],
                "created_at": now,
                "expires_at": now + timedelta(days=int(settings.SAS_API_TOKEN_DAYS)),
            },
        )
    return IssuedToken(key=key, token=token)


def api_token_revoke(*, user_id: int) -> bool:
    """Delete the user's token; False when it had none."""
    deleted, _ = ApiToken.objects.filter(user_id=user_id).delete()
    return deleted > 0


def api_token_of(*, user_id: int) -> ApiToken | None:
    return ApiToken.objects.filter(user_id=user_id).first()


def api_token_find(*, key: str) -> ApiToken | None:
    """The token whose key this is (with its user), expired or not; None for no such key."""
    if not key or len(key) > KEY_MAX_LENGTH:
        return None
    return ApiToken.objects.select_related("user").filter(digest=token_digest(key)).first()

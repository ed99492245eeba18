"""Sign-in throttling (issue 22, "Bad input, tried for real"): brute force on the site's and the
admin's sign-in forms.

Failed sign-ins are counted in Redis per username and per client address, in a fixed window
that starts at the first failure (SAS_LOGIN_THROTTLE: FAILURES_PER_USERNAME, FAILURES_PER_IP,
WINDOW seconds). Once either count reaches its limit, the form refuses every attempt - even one
with the right password, or a guesser would learn it - with a message naming the limit and the
seconds left, until the window ends. A successful sign-in clears its username's count (not the
address's: one account that works must not reset an address that is guessing others).

Why not django-axes: it writes a database row per attempt (a brute force then becomes a write
load on PostgreSQL) and brings its own middleware, backend and admin; the counters here are two
Redis keys with a TTL, on the Redis the site already runs. Redis unreachable: the form lets the
attempt through and logs it (fails open, like the rate limiter in scheduler/limits.py) - the
password check itself still stands.

The username is hashed in the key (any text a client types, bounded length, no user data in
Redis). The address is REMOTE_ADDR: behind a proxy that is the proxy's, so the per-address
limit then counts the whole site; the per-username limit still holds.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Any

import redis
from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest

from sasproject.redis_client import get_redis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoginBlocked:
    """Why an attempt is refused: which count, its limit, and the seconds until the window ends."""

    what: str  # "this username" | "this address"
    limit: int
    window: int
    retry_after: int

    @property
    def message(self) -> str:
        minutes = max(1, round(self.window / 60))
        return (
            f"Too many failed sign-in attempts for {self.what}: the limit is {self.limit} per "
            f"{minutes} minutes. Try again in {self.retry_after} s."
        )


def _config() -> tuple[int, int, int]:
    conf = settings.SAS_LOGIN_THROTTLE
    return int(conf["FAILURES_PER_USERNAME"]), int(conf["FAILURES_PER_IP"]), int(conf["WINDOW"])


def _keys(*, username: str, ip: str) -> dict[str, str]:
    digest = hashlib.sha256(username.strip().lower().encode("utf-8", "surrogatepass")).hexdigest()[:32]
    prefix = f"{settings.REDIS_PREFIX}sas:login:fail"
    return {"this username": f"{prefix}:user:{digest}", "this address": f"{prefix}:ip:{ip[:64]}"}


def client_address(request: HttpRequest | None) -> str:
    return str(request.META.get("REMOTE_ADDR", "") if request is not None else "") or "unknown"


def login_blocked(*, username: str, ip: str) -> LoginBlocked | None:
    """The refusal when either count is at its limit (0 disables a limit), else None."""
    per_user, per_ip, window = _config()
    keys = _keys(username=username, ip=ip)
    limits = {"this username": per_user, "this address": per_ip}
    try:
        pipe = get_redis().pipeline()
        for key in keys.values():
            pipe.get(key)
            pipe.ttl(key)
        replies = pipe.execute()
    except redis.RedisError:
        logger.warning("login throttle: Redis unreachable; attempt let through")
        return None
    for index, what in enumerate(keys):
        count, ttl = replies[2 * index], replies[2 * index + 1]
        limit = limits[what]
        if limit and count is not None and int(count) >= limit:
            return LoginBlocked(what=what, limit=limit, window=window, retry_after=max(1, int(ttl)))
    return None


def login_failure_record(*, username: str, ip: str) -> None:
    """Count one failed attempt against the username and the address (the window starts at the
    first failure: SET NX with the TTL, then INCR)."""
    _, _, window = _config()
    try:
        pipe = get_redis().pipeline()
        for key in _keys(username=username, ip=ip).values():
            pipe.set(key, 0, ex=window, nx=True)
            pipe.incr(key)
        pipe.execute()
    except redis.RedisError:
        logger.warning("login throttle: Redis unreachable; failure not counted")
    logger.warning("sign-in failed for a username from %s", ip)


def login_success_record(*, username: str) -> None:
    try:
        get_redis().delete(_keys(username=username, ip="")["this username"])
    except redis.RedisError:
        logger.warning("login throttle: Redis unreachable; count not cleared")


class _ThrottledMixin:
    """clean() of an AuthenticationForm with the throttle around it."""

    request: HttpRequest | None
    cleaned_data: dict[str, Any]

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        ip = client_address(self.request)
        blocked = login_blocked(username=username, ip=ip)
        if blocked is not None:
            logger.warning("sign-in refused (%s over %s failures) from %s", blocked.what, blocked.limit, ip)
            raise forms.ValidationError(blocked.message, code="throttled")
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            login_failure_record(username=username, ip=ip)
            raise
        login_success_record(username=username)
        return cleaned


class ThrottledAuthenticationForm(_ThrottledMixin, AuthenticationForm):
    """The site's sign-in (/accounts/login/)."""


class ThrottledAdminAuthenticationForm(_ThrottledMixin, AdminAuthenticationForm):
    """The admin's sign-in (/admin/login/)."""

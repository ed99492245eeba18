"""The rate limiter (`scheduler.limits.rate_take`) at the doors: a DRF throttle for the API
views and a call for the pages, so a scope's budget is one per user whichever door is used.

The DRF throttle raises `RateLimited` instead of answering False: DRF's own refusal says only
"Request was throttled", while ours names the limit; the API's exception handler
(`orders.api_base.exception_handler`) turns it into a 429 with Retry-After.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework.throttling import BaseThrottle

from .limits import RateLimited, rate_take


def request_rate_take(request: Any, scope: str) -> None:
    """Take one of the signed-in user's requests in `scope` (RateLimited when over). Anonymous
    requests are not counted here: every path that creates work requires a user."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return
    rate_take(scope=scope, owner_id=int(user.pk))


class ScopeThrottle(BaseThrottle):
    """A DRF throttle for one scope of settings.SAS_RATES: `ScopeThrottle.of("job_write")`."""

    scope = ""

    @classmethod
    def of(cls, scope: str) -> ScopeThrottle:
        throttle = cls()
        throttle.scope = scope
        return throttle

    def allow_request(self, request: Any, view: Any) -> bool:
        request_rate_take(request, self.scope)
        return True


def page_rate_refusal(request: HttpRequest, scope: str) -> RateLimited | None:
    """For a page: None when the user may go on, else the refusal to show (its message names
    the limit; its retry_after is the page's Retry-After)."""
    try:
        request_rate_take(request, scope)
    except RateLimited as exc:
        return exc
    return None

"""What a customer is told about their whole account (issue 30): paused by an operator, and why.
One function for the pages' banner (the context processor) and the API's `account` field."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from scheduler.services import pause_of_owner


def account_status(*, owner_id: int) -> dict[str, Any]:
    """{"paused": bool, "paused_reason": str, "paused_at": datetime | None} for `owner_id`."""
    pause = pause_of_owner(owner_id=owner_id)
    return {
        "paused": pause is not None,
        "paused_reason": pause.reason if pause else "",
        "paused_at": pause.created_at if pause else None,
    }


def account_pause(request: HttpRequest) -> dict[str, Any]:
    """Context processor: `account` for a signed-in user's pages (the banner in base.html)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"account": account_status(owner_id=user.pk)}

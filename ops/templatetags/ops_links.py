"""Links the admin's templates show to operator tools outside Django (Flower)."""

from __future__ import annotations

from django import template
from django.conf import settings

register = template.Library()


@register.simple_tag
def flower_url() -> str:
    """Flower's address (settings.SAS_MONITORING["FLOWER_URL"]); empty when there is none."""
    return str(settings.SAS_MONITORING.get("FLOWER_URL") or "")

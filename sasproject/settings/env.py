"""Reading settings from the environment: the helpers every settings module uses (a value
missing or empty keeps its default; a malformed one is refused at start with a clear error)."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return default if value in (None, "") else float(value)


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_slots(name: str, default: dict[str, int]) -> dict[str, int]:
    """`queue=slots,queue=slots` (SAS_BULKHEAD_SLOTS): each named queue's slots, over the default."""
    value = os.environ.get(name)
    slots = dict(default)
    for item in (value or "").split(","):
        if not item.strip():
            continue
        queue, sep, count = item.partition("=")
        if not sep or not queue.strip() or not count.strip().isdigit() or int(count) < 1:
            raise ImproperlyConfigured(
                f"{name}: {item.strip()!r} is not queue=slots (a whole number above 0)"
            )
        slots[queue.strip()] = int(count)
    return slots


def denied_defaults(origins: list[str]) -> list[str]:
    """The egress deny list's default: the remote services' payment, inventory, shipping and
    control (`/_...`) paths on each of their origins (`http://host:port[/base]`)."""
    entries: list[str] = []
    for origin in origins:
        parts = urlsplit(origin)
        for path in ("/payment", "/inventory", "/shipping", "/_"):
            entry = f"{parts.netloc}{parts.path.rstrip('/')}{path}"
            if parts.netloc and entry not in entries:
                entries.append(entry)
    return entries

"""OpenAPI post-processing for drf-spectacular (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"])."""

from __future__ import annotations

from typing import Any

from .workflows import MAX_ITEMS

# The order input refuses unknown fields (a typo must not be silently ignored): say so.
CLOSED_REQUEST_COMPONENTS = ("OrderCreateRequest", "ItemRequest")


def close_request_objects(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    schemas = result.get("components", {}).get("schemas", {})
    for name in CLOSED_REQUEST_COMPONENTS:
        if name in schemas:
            schemas[name]["additionalProperties"] = False
    items = schemas.get("OrderCreateRequest", {}).get("properties", {}).get("items")
    if items is not None:  # drf-spectacular does not carry a list serializer's length limits
        items.update({"minItems": 1, "maxItems": MAX_ITEMS})
    return result

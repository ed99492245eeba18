"""OpenAPI post-processing for drf-spectacular (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]).
(Closed inputs - additionalProperties: false - are sasproject.api_schema's, for every app.)"""

from __future__ import annotations

from typing import Any

from .workflows import MAX_ITEMS


def order_items_length(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    schemas = result.get("components", {}).get("schemas", {})
    items = schemas.get("OrderCreateRequest", {}).get("properties", {}).get("items")
    if items is not None:  # drf-spectacular does not carry a list serializer's length limits
        items.update({"minItems": 1, "maxItems": MAX_ITEMS})
    return result

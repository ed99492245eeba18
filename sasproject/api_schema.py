"""The API's OpenAPI schema class (REST_FRAMEWORK DEFAULT_SCHEMA_CLASS): drf-spectacular's, plus
the rules our serializers enforce that it does not read by itself."""

from __future__ import annotations

from typing import Any

from drf_spectacular import openapi

from .api_input import ClosedSerializer


class AutoSchema(openapi.AutoSchema):
    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        schema: dict[str, Any] = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and isinstance(serializer, ClosedSerializer):
            schema["additionalProperties"] = False  # unknown fields are refused (api_input)
        return schema


ERROR_BODY = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
# Answers any operation may give, whatever its view declares: no or a wrong token; a body that
# is not JSON the parser takes (sasproject.json_input) or too large.
UNAUTHORIZED = {
    "description": 'No or a wrong token: {"detail": "..."}, with WWW-Authenticate.',
    "content": {"application/json": {"schema": ERROR_BODY}},
}
BAD_BODY = {
    "description": "Field errors {field: [messages]}, or a body that is not JSON we take "
    '(not JSON, nested too deep, a NUL in a string): {"detail": "..."}.',
    "content": {"application/json": {"schema": {"type": "object"}}},
}
NOT_FOUND = {
    "description": 'No such object for this user, or no such page: {"detail": "..."}.',
    "content": {"application/json": {"schema": ERROR_BODY}},
}
TOO_LARGE = {
    "description": 'A body over the size limit (settings.DATA_UPLOAD_MAX_MEMORY_SIZE): {"detail": "..."}.',
    "content": {"application/json": {"schema": ERROR_BODY}},
}


def document_common_responses(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]: the 401 of every operation that needs
    authentication, the 400 and 413 of every operation that reads a body, the 404 of every
    operation with an id in its path or a page number."""
    for path in result.get("paths", {}).values():
        for method, operation in path.items():
            responses = operation.setdefault("responses", {})
            parameters = operation.get("parameters", [])
            for parameter in parameters:
                if parameter.get("name") == "page" and parameter.get("in") == "query":
                    parameter.setdefault("schema", {}).update({"type": "integer", "minimum": 1})
            if any(p.get("in") == "path" or p.get("name") == "page" for p in parameters):
                responses.setdefault("404", NOT_FOUND)
            if operation.get("security") and {} not in operation["security"]:
                responses.setdefault("401", UNAUTHORIZED)
            if method in ("post", "put", "patch"):
                responses.setdefault("400", BAD_BODY)
                responses.setdefault("413", TOO_LARGE)
    return result

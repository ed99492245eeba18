"""JSON from users, read one way everywhere: the API's parser (REST_FRAMEWORK
DEFAULT_PARSER_CLASSES), the pages' and the admin's JSON text areas (`JSONFormField`).

Python's `json` recurses once per nesting level: a 2 kB body of `[[[[...` a thousand deep raised
RecursionError, a 500 (issue 18). PostgreSQL refuses NUL in `jsonb` and `text`, and NaN or
Infinity in `jsonb`: a `\\u0000` inside a job's input was a DataError at the INSERT, another 500.
So before anything else reads it, a document is refused with a message that names the limit when
it nests deeper than settings.SAS_JSON_MAX_DEPTH, holds a NUL in any string or key, or a number
that is not finite; and the API refuses a body larger than DATA_UPLOAD_MAX_MEMORY_SIZE (413).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from django import forms
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework import parsers
from rest_framework.exceptions import ParseError

# A string literal (skipped: brackets inside it do not nest) or a bracket. Possessive, and an
# unterminated string runs to the end: every match consumes, so the scan is linear in any text.
_TOKENS = re.compile(r'"(?:[^"\\]++|\\.?)*+(?:"|\Z)|[\[\]{}]', re.DOTALL)


class JSONInputError(ValueError):
    """The document is not JSON, or is JSON we do not take; the message says which rule."""


def json_max_depth() -> int:
    return int(settings.SAS_JSON_MAX_DEPTH)


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in `text` (0 for a scalar), counted without parsing,
    so no depth can exhaust the stack. Brackets inside strings do not count."""
    depth = deepest = 0
    for match in _TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def _refuse_constant(name: str) -> Any:
    raise JSONInputError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400
        raise JSONInputError(f"the number {text[:20]} is out of range")
    return value


def _check_strings(value: Any) -> None:
    """Refuse a NUL in any string or key (depth is bounded already, so recursion is too)."""
    if isinstance(value, str):
        if "\x00" in value:
            raise JSONInputError("a string holds a NUL character (\\u0000), which is not accepted")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_strings(key)
            _check_strings(item)
    elif isinstance(value, list):
        for item in value:
            _check_strings(item)


def json_parse(text: str | bytes) -> Any:
    """`text` as JSON, or JSONInputError: not JSON, nested deeper than SAS_JSON_MAX_DEPTH, a NUL
    in a string or key, NaN / Infinity or a number out of float range."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise JSONInputError("not UTF-8") from None
    limit = json_max_depth()
    if json_depth(text) > limit:
        raise JSONInputError(f"nested more than {limit} levels deep")
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except JSONInputError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, digits limit
        raise JSONInputError(f"not valid JSON ({exc})") from None
    _check_strings(value)
    return value


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser through `json_parse`: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413
    (DRF reads the stream itself, around Django's check of `request.body`), any refused
    document a 400 that says why."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise RequestDataTooBig("Request body exceeded settings.DATA_UPLOAD_MAX_MEMORY_SIZE.")
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            text = raw.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise ParseError(f"JSON parse error - not {encoding}") from None
        try:
            return json_parse(text)
        except JSONInputError as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


class JSONFormField(forms.JSONField):
    """A form's JSON text area read by `json_parse`: the same limits as the API, as a form
    error on the field."""

    def to_python(self, value: Any) -> Any:
        if self.disabled or value in self.empty_values or not isinstance(value, str):
            return super().to_python(value)
        try:
            parsed = json_parse(value)
        except JSONInputError as exc:
            raise forms.ValidationError(f"Enter valid JSON: {exc}.", code="invalid") from None
        return forms.fields.JSONString(parsed) if isinstance(parsed, str) else parsed

    def bound_data(self, data: Any, initial: Any) -> Any:
        # Django re-parses the submitted text to redisplay it; a refused text is shown as typed.
        if self.disabled or not isinstance(data, str):
            return super().bound_data(data, initial)
        try:
            return json_parse(data)
        except JSONInputError:
            return forms.fields.InvalidJSONInput(data)

"""Every API read answers an anonymous request 401 with `WWW-Authenticate: Token`, as docs/using/api.md
says (issue 26: `GET /api/runs/<id>/progress/` answered 403 - DRF takes the challenge from the
first authentication class, and the session's has none). The reads are taken from the served
OpenAPI schema, so an endpoint added later is covered without editing this test."""

from __future__ import annotations

import re
import uuid
from typing import Any

from django.test import Client

PUBLIC = {"/api/schema/"}  # documents, grants nothing


def _reads(client: Client) -> list[str]:
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths: list[str] = []
    for path, operations in schema["paths"].items():
        if "get" not in operations or path in PUBLIC:
            continue
        params = {p["name"]: p.get("schema", {}) for p in operations["get"].get("parameters", [])}

        def value(match: re.Match[str], params: dict[str, Any] = params) -> str:
            kind = params.get(match.group(1), {})
            return str(uuid.uuid4()) if kind.get("format") == "uuid" else "1"

        paths.append(re.sub(r"\{(\w+)\}", value, path))
    return paths


def test_api__every_read_anonymous__401_with_token_challenge(db: None) -> None:
    client = Client()
    reads = _reads(client)
    assert len(reads) >= 10 and any("/progress/" in path for path in reads)
    answers = {path: client.get(path) for path in reads}
    wrong = {
        path: (response.status_code, response.get("WWW-Authenticate"))
        for path, response in answers.items()
        if response.status_code != 401 or response.get("WWW-Authenticate") != "Token"
    }
    assert not wrong, wrong

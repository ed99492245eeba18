"""`GET /api/webhook-secret/` says how a delivery is signed (issue 26, item 7): it said "HMAC-SHA256
of the raw request body", but the signer covers "<t>.<body>" - a receiver that followed it
refused every delivery. Now a verification done exactly as the answer describes accepts a
signature made by the signer the webhook agent uses, and the schema documents the same."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from rest_framework.test import APIClient

from webhooks.signing import signature_compute, signature_verify


def _verify_as_described(described: dict[str, Any], secret: str, body: bytes, header: str) -> bool:
    """A receiver that reads only the answer: the header's format, the signed text, the scheme."""
    names = [part.split("=", 1)[0] for part in described["header_format"].split(",")]
    assert names == ["t", "v1"], described["header_format"]
    fields = dict(part.split("=", 1) for part in header.split(","))
    signed = (
        described["signed_payload"]
        .encode()
        .replace(b"<t>", fields["t"].encode())
        .replace(b"<raw body>", body)
    )
    assert "HMAC-SHA256" in described["algorithm"]
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])


def test_webhook_secret__the_description__verifies_a_real_signature(api: APIClient) -> None:
    described = api.get("/api/webhook-secret/").json()
    secret = described["secret"]
    body = json.dumps({"event_id": "e-1", "state": "completed"}, separators=(",", ":")).encode()
    header = signature_compute(secret=secret, body=body, timestamp=1_764_000_000)

    assert described["header"] == "X-SAS-Signature"
    assert _verify_as_described(described, secret, body, header)
    assert not _verify_as_described(described, secret, body + b" ", header)
    assert not _verify_as_described(described, "another secret", body, header)
    # What it used to say - an HMAC of the raw body alone - does not match the signer.
    fields = dict(part.split("=", 1) for part in header.split(","))
    assert hmac.new(secret.encode(), body, hashlib.sha256).hexdigest() != fields["v1"]
    assert "raw request body, hex" not in described["algorithm"]
    assert described["tolerance_seconds"] == 300
    assert signature_verify(secret=secret, body=body, header=header, now=1_764_000_000)


def test_webhook_secret__schema__documents_the_signed_text(api: APIClient) -> None:
    schema = json.loads(api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    fields = schema["components"]["schemas"]["WebhookSecret"]["properties"]
    assert set(fields) >= {"secret", "algorithm", "header", "header_format", "signed_payload"}
    assert "<t>.<raw body>" in fields["signed_payload"]["description"]

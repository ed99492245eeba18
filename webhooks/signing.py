"""Webhook signatures: `X-SAS-Signature: sha256=<hex HMAC-SHA256 of the raw body>` under the
owner's secret. Receivers verify with `signature_verify` (or the snippet in docs/api.md)."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-SAS-Signature"
EVENT_ID_HEADER = "X-SAS-Event-Id"
TIMESTAMP_HEADER = "X-SAS-Timestamp"
SEQUENCE_HEADER = "X-SAS-Sequence"


def signature_compute(*, secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def signature_verify(*, secret: str, body: bytes, header: str) -> bool:
    """Constant-time check of a received `X-SAS-Signature` header against the raw body."""
    return hmac.compare_digest(signature_compute(secret=secret, body=body), header or "")

"""Webhook signatures, as Stripe signs its webhooks: the signed text is `<timestamp>.<body>`, so a
captured delivery cannot be replayed later with a fresh timestamp (docs/using/api.md#webhooks).

    X-SAS-Signature: t=1764000000,v1=<hex HMAC-SHA256 of "1764000000." + raw body>

under the owner's secret. Each attempt of a delivery is signed when it is sent (its own `t`).
Receivers verify with `signature_verify` (or the snippet in docs/using/api.md): the HMAC over the
received bytes, in constant time, and `t` within the replay window (`tolerance` seconds, by
default SAS_WEBHOOK_SIGNATURE_TOLERANCE = 300). A header may carry several `v1=` (during a
secret rotation a receiver may be sent either); one matching is enough.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-SAS-Signature"
EVENT_ID_HEADER = "X-SAS-Event-Id"
TIMESTAMP_HEADER = "X-SAS-Timestamp"
SEQUENCE_HEADER = "X-SAS-Sequence"
SCHEME = "v1"
DEFAULT_TOLERANCE = 300

# What `_mac` signs, in words, for receivers (GET /api/webhook-secret/, docs/using/api.md): written
# here beside it so the two cannot drift apart (issue 26: it once said "the raw request body").
HEADER_FORMAT = f"t=<Unix seconds>,{SCHEME}=<hex signature>"
SIGNED_PAYLOAD = "<t>.<raw body>"
ALGORITHM = (
    "HMAC-SHA256, keyed with the secret's UTF-8 bytes, of the header's t value, a full stop, then "
    f"the raw request body's bytes (\"{SIGNED_PAYLOAD}\"); hex; it must equal one of the header's "
    f"{SCHEME} values, and t must be within the replay window of your clock"
)


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_compute(*, secret: str, body: bytes, timestamp: int) -> str:
    """The `X-SAS-Signature` value for `body` sent at `timestamp` (Unix seconds)."""
    return f"t={timestamp},{SCHEME}={_mac(secret, timestamp, body)}"


def signature_verify(
    *, secret: str, body: bytes, header: str, tolerance: int = DEFAULT_TOLERANCE, now: float | None = None
) -> bool:
    """True if `header` signs the raw `body` under `secret` and its timestamp is at most
    `tolerance` seconds away from `now` (default: the clock). Constant-time comparison; a
    missing, malformed or replayed (too old) header is False."""
    timestamp: int | None = None
    signatures: list[str] = []
    for item in (header or "").split(","):
        key, _, value = item.strip().partition("=")
        # ASCII digits only: str.isdigit() is also true of "²", which int() refuses (issue 22).
        if key == "t" and value.isascii() and value.isdigit() and len(value) <= 12:
            timestamp = int(value)
        elif key == SCHEME and value:
            signatures.append(value)
    if timestamp is None or not signatures:
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = _mac(secret, timestamp, body)
    return any(hmac.compare_digest(expected, signature) for signature in signatures)

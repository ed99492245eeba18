"""Where outbound calls may go (issue 8, issue 18): HTTP-call jobs, order callbacks and
webhook deliveries - the egress policy and its limits."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

from sasproject.settings.engine import SAS
from sasproject.settings.env import denied_defaults, env_float, env_list

# --------------------------------------------------------------------------------------------
# Job targets (issue 8): HTTP-call jobs and @schedulable tasks. See docs/using/jobs-targets.md.
# --------------------------------------------------------------------------------------------
# The egress policy (issue 18; agents/egress.py, docs/using/jobs-targets.md "The egress policy"): where
# an outbound call a customer can aim may go. Entries: `host`, `host:port`, `*.example.com`, an
# IP address written out (`203.0.113.7`, `[2001:db8::1]:8443`), `*` (any host, public addresses
# only), each optionally scoped to a path prefix (`127.0.0.1:8055/echo`). Comma-separated in the
# environment. `<PREFIX>_PRIVATE_HOSTS` (hosts only) may be or resolve to loopback / private /
# link-local / CGNAT addresses; every other name must resolve to public addresses (checked at
# call time, and the connection goes to the checked address). Cloud metadata endpoints are
# never allowed.
_SIMULATOR_URL = os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
_SIMULATOR_NETLOC = urlsplit(_SIMULATOR_URL).netloc
# `http.call` jobs. Default: the simulator's `/echo` only (the demo's jobs). Its host:port is the
# one private host (in Docker `simulator` resolves to a private address); the allowlist's path
# scope still limits it to /echo.
SAS_HTTP_JOB_ALLOWED_HOSTS = env_list("SAS_HTTP_JOB_ALLOWED_HOSTS", [f"{_SIMULATOR_NETLOC}/echo"])
SAS_HTTP_JOB_PRIVATE_HOSTS = env_list("SAS_HTTP_JOB_PRIVATE_HOSTS", [_SIMULATOR_NETLOC])
# Order callbacks (`callback_url`, webhooks/). Default: any public host; nothing private.
SAS_CALLBACK_ALLOWED_HOSTS = env_list("SAS_CALLBACK_ALLOWED_HOSTS", ["*"])
SAS_CALLBACK_PRIVATE_HOSTS = env_list("SAS_CALLBACK_PRIVATE_HOSTS", [])
# Refused by every policy, whatever it allows (a path here is a plain case-insensitive prefix,
# matched against the URL's host and every address it resolves to). Default: the remote
# services' payment, inventory, shipping and control (`/_faults`, `/_ledger`, `/_stats`: `/_`)
# paths. SAS_EGRESS_DENIED_EXTRA adds entries to the default instead of replacing it.
SAS_EGRESS_DENIED = env_list(
    "SAS_EGRESS_DENIED",
    denied_defaults([_SIMULATOR_URL, *SAS["REMOTE_URLS"].values()]),
) + env_list("SAS_EGRESS_DENIED_EXTRA", [])
# The `http.call` step's policy: one attempt's window (and the largest `timeout` an input may
# ask for), attempts before it errors, backoff between attempts, the whole step's deadline
# (bounds the wait while a host's breaker is open), and how much of a response body is kept.
SAS_HTTP_JOBS = {
    "STEP_TIMEOUT": env_float("SAS_HTTP_JOB_STEP_TIMEOUT", 30.0),
    "MAX_FAILURES": int(os.environ.get("SAS_HTTP_JOB_MAX_FAILURES", "3")),
    "BACKOFF_BASE": env_float("SAS_HTTP_JOB_BACKOFF_BASE", 1.0),
    "BACKOFF_MAX": env_float("SAS_HTTP_JOB_BACKOFF_MAX", 60.0),
    "STEP_DEADLINE": env_float("SAS_HTTP_JOB_STEP_DEADLINE", 300.0),
    "RESPONSE_MAX_BYTES": int(os.environ.get("SAS_HTTP_JOB_RESPONSE_MAX_BYTES", "4096")),
}
# How much of an answer a webhook delivery reads (it only needs the status; the rest is dropped
# with the connection), under the attempt's total deadline (agents/outbound.py).
SAS_WEBHOOK_RESPONSE_MAX_BYTES = int(os.environ.get("SAS_WEBHOOK_RESPONSE_MAX_BYTES", "4096"))
# Webhook signatures cover `<timestamp>.<body>`; receivers refuse a timestamp older than this
# (seconds), so a captured delivery cannot be replayed later (webhooks/signing.py).
SAS_WEBHOOK_SIGNATURE_TOLERANCE = int(os.environ.get("SAS_WEBHOOK_SIGNATURE_TOLERANCE", "300"))

"""The test profile (issue 27): the short step windows, backoffs and intervals with which the
live tests and the chaos soak run the engine, so a crash or a deadline is judged in seconds, not
minutes. They are environment variables, not a settings module, because the worker, beat and web
subprocesses read them through `sasproject.settings` like any deployment would: the test session
(tests/envsetup.py) and the soak (soak/stack.py) both set them from here, each adding only what
is its own.
"""

from __future__ import annotations

from collections.abc import MutableMapping

# Shared by the tests and the soak.
SHORT_WINDOWS: dict[str, str] = {
    "SAS_ORDER_STEP_TIMEOUT": "3",
    "SAS_ORDER_QUEUE_TIMEOUT": "2",
    "SAS_ORDER_COMPENSATION_BACKOFF_MAX": "2",
    "SAS_ORDER_COMPENSATION_ALERT_AFTER": "6",
    "SAS_ORDER_MAX_FAILURES": "3",
    "SAS_ORDER_BACKOFF_BASE": "0.2",
    "SAS_ORDER_BACKOFF_MAX": "1",
    "SAS_SUPERVISOR_INTERVAL": "1",
    "SAS_SCHEDULER_TICK_INTERVAL": "1",
    "SAS_BREAKER_FAILURE_THRESHOLD": "5",
    "SAS_BREAKER_RESET_TIMEOUT": "2",
    # Long steps (issue 9): a page's window of 3 s; exports heartbeat every 0.5 s with a 1.5 s
    # window and take at least 3 s (the demo's minute is for people).
    "SAS_CATALOGUE_PAGE_TIMEOUT": "3",
    "SAS_CATALOGUE_QUEUE_TIMEOUT": "2",
    "SAS_CATALOGUE_PAGE_DELAY": "0",
    "SAS_EXPORT_HEARTBEAT": "1.5",
    "SAS_EXPORT_QUEUE_TIMEOUT": "2",
    "SAS_EXPORT_DEADLINE": "60",
    "SAS_EXPORT_MIN_SECONDS": "3",
    "LOG_LEVEL": "INFO",
}

# The test session's (tests/envsetup.py): its processes and the worker subprocesses it starts.
TEST_PROFILE: dict[str, str] = {
    **SHORT_WINDOWS,
    "SAS_ORDER_STEP_DEADLINE": "90",
    "SAS_CATALOGUE_PAGE_SIZE": "1000",
    "SAS_HTTP_JOB_STEP_TIMEOUT": "5",
    "SAS_HTTP_JOB_BACKOFF_BASE": "0.2",
    "SAS_HTTP_JOB_BACKOFF_MAX": "1",
    # Webhook tests deliver to receivers on this machine (127.0.0.1, any port): allowed for the
    # test suite explicitly; the default (sasproject/settings/egress.py) allows no private
    # address. Tests of the default set SAS_CALLBACK_PRIVATE_HOSTS back to []
    # (tests/webhooks/test_egress.py).
    "SAS_CALLBACK_PRIVATE_HOSTS": "127.0.0.1",
    "DATABASE_CONN_MAX_AGE": "0",
}

# The chaos soak's (soak/stack.py): its own servers and Procfile processes.
SOAK_PROFILE: dict[str, str] = {
    **SHORT_WINDOWS,
    "SAS_ORDER_STEP_DEADLINE": "60",
    "SAS_CATALOGUE_PAGE_SIZE": "500",
    # The load is the soak's to set: rates that do not refuse it (quotas stay as shipped).
    "SAS_ORDER_RATE": "100000/minute",
    "SAS_JOB_WRITE_RATE": "100000/minute",
    "SAS_EXPORT_RATE": "100000/hour",
    "SAS_QUOTA_EXPORTS_IN_FLIGHT": "100",
    "SAS_ALERTS_ENABLED": "1",
}


def apply_profile(environ: MutableMapping[str, str], profile: dict[str, str]) -> None:
    """Set `profile`'s variables in `environ` (os.environ, or a subprocess's env dict)."""
    environ.update(profile)

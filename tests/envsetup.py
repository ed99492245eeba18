"""Loaded with `-p tests.envsetup` (pyproject addopts) before pytest-django imports settings.

Sets the environment the test process AND the worker subprocesses it starts share:
- a Redis database of its own (db 15 unless REDIS_TEST_URL says otherwise), flushed per session,
  so tests never read or purge the broker that `make run` uses;
- the test profile (sastools/profile.py): short step windows and backoffs so crash/deadline
  scenarios finish in seconds;
- a free port for the simulator the session starts;
- bytecode caches written, whatever PYTHONDONTWRITEBYTECODE says (below).
"""

from __future__ import annotations

import os
import socket
import sys

from sastools.profile import TEST_PROFILE, apply_profile

# Every pytest process (each pytest-xdist worker) imports the product code and the test modules,
# and pytest rewrites the asserts of every test module and of its plugins' packages (Hypothesis,
# schemathesis). Both are cached in __pycache__ - unless Python may not write bytecode, as
# PYTHONDONTWRITEBYTECODE=1 (set on this machine, as in many Python images) says: then each process
# compiled and rewrote all of it again, 21 s of CPU to collect the suite against 9 s with the
# caches (issue 27 item 7; docs/decisions.md). This module is loaded with `-p` before any other
# plugin or test module is imported, so from here on the caches are written (gitignored; a
# directory we may not write is skipped). Worker subprocesses read them whatever the variable says.
sys.dont_write_bytecode = False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _test_redis_url() -> str:
    if os.environ.get("REDIS_TEST_URL"):
        return os.environ["REDIS_TEST_URL"]
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    head, _, tail = base.rpartition("/")
    if tail.isdigit() and head.count("/") >= 2:
        return f"{head}/15"
    return base.rstrip("/") + "/15"


os.environ["REDIS_URL"] = _test_redis_url()
# Several test sessions may share one machine (developers, CI): each gets its own database and
# its own Redis key prefix (broker queues and breaker keys), so they never see each other.
os.environ["DATABASE_TEST_NAME"] = f"test_sasproject_{os.getpid()}"
os.environ["SAS_REDIS_PREFIX"] = f"test{os.getpid()}:"
os.environ.pop("CELERY_BROKER_URL", None)
# The test process talks to PostgreSQL itself; its subprocesses go through a pooler only when the
# session says so (SAS_TEST_POOLER=1, tests/conftest.py `worker_env`).
os.environ.pop("DATABASE_DIRECT_URL", None)
os.environ.pop("SAS_BREAKER_REDIS_URL", None)
# The session starts its own simulator on a free port (never the one `make run` uses).
os.environ["SIMULATOR_URL"] = f"http://127.0.0.1:{_free_port()}"
for service in ("INVENTORY", "PAYMENT", "SHIPPING"):
    os.environ.pop(f"SAS_{service}_URL", None)
# HTTP-call jobs may call the session's simulator's /echo only (the default egress policy).
for name in (
    "SAS_HTTP_JOB_ALLOWED_HOSTS",
    "SAS_HTTP_JOB_PRIVATE_HOSTS",
    "SAS_CALLBACK_ALLOWED_HOSTS",
    "SAS_EGRESS_DENIED",
    "SAS_EGRESS_DENIED_EXTRA",
):
    os.environ.pop(name, None)
# The test settings (issue 19): DEBUG on in this process (pytest-django turns it off for each
# test; on here keeps the plain static storage, no collectstatic), and a secret key of the
# session's own, so worker subprocesses, which run with DEBUG off (conftest's worker_env), start.
os.environ["DJANGO_DEBUG"] = "1"
if not os.environ.get("DJANGO_SECRET_KEY", "").strip() or os.environ["DJANGO_SECRET_KEY"].startswith("dev-"):
    os.environ["DJANGO_SECRET_KEY"] = f"test-session-key-{os.getpid()}-{os.urandom(24).hex()}"
# Human log lines, whatever the shell says (the JSON format has its own test).
os.environ.pop("LOG_FORMAT", None)
os.environ.pop("SAS_DEMO", None)
# The test profile (short windows), shared with the soak: sastools/profile.py.
apply_profile(os.environ, TEST_PROFILE)

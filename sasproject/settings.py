"""Django settings for sasproject.

Everything that differs between a laptop, CI and production comes from the environment, with
defaults that run locally (cookiecutter-django style). `DATABASE_URL` and `REDIS_URL` choose the
PostgreSQL and Redis to use; `make run` / `make test` fill them in (starting embedded servers when
the machine has none, see `devservices/`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from sasproject.logs import logging_config

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return default if value in (None, "") else float(value)


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_slots(name: str, default: dict[str, int]) -> dict[str, int]:
    """`queue=slots,queue=slots` (SAS_BULKHEAD_SLOTS): each named queue's slots, over the default."""
    value = os.environ.get(name)
    slots = dict(default)
    for item in (value or "").split(","):
        if not item.strip():
            continue
        queue, sep, count = item.partition("=")
        if not sep or not queue.strip() or not count.strip().isdigit() or int(count) < 1:
            raise ImproperlyConfigured(
                f"{name}: {item.strip()!r} is not queue=slots (a whole number above 0)"
            )
        slots[queue.strip()] = int(count)
    return slots


def denied_defaults(origins: list[str]) -> list[str]:
    """The egress deny list's default: the remote services' payment, inventory, shipping and
    control (`/_...`) paths on each of their origins (`http://host:port[/base]`)."""
    entries: list[str] = []
    for origin in origins:
        parts = urlsplit(origin)
        for path in ("/payment", "/inventory", "/shipping", "/_"):
            entry = f"{parts.netloc}{parts.path.rstrip('/')}{path}"
            if parts.netloc and entry not in entries:
                entries.append(entry)
    return entries


# --------------------------------------------------------------------------------------------
# --- production profile (issue 19): DEBUG, the secret key, hosts ---
# Safe by default: DEBUG is off unless the environment turns it on (`make run` and the tests do,
# see the Makefile and tests/envsetup.py), and a process with DEBUG off refuses the development
# key. The rest of the profile (HTTPS, cookies, static files, pages) is in the block "production
# profile: HTTPS, cookies, static files" below. docker/production.env.example lists every variable.
# https://docs.djangoproject.com/en/5.2/howto/deployment/checklist/
# --------------------------------------------------------------------------------------------
DEV_SECRET_KEY = "dev-insecure-secret-key-change-me-in-production"
# Empty counts as unset (docker/production.env.example leaves it empty on purpose).
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY") or DEV_SECRET_KEY
DEBUG = env_bool("DJANGO_DEBUG", False)
if not DEBUG and SECRET_KEY == DEV_SECRET_KEY:
    # Sessions, password-reset tokens and signed values would be forgeable by anyone who has
    # read this file. Refused at import, so no process (web, worker, beat, manage.py) starts.
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is not set (or is the development key) and DJANGO_DEBUG is off. Set "
        "DJANGO_SECRET_KEY to a long random value, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))' "
        "(docker/production.env.example), or DJANGO_DEBUG=1 on a development machine."
    )
# Host names this site answers to; any other Host header gets a 400. Comma-separated.
# https://docs.djangoproject.com/en/5.2/ref/settings/#allowed-hosts
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]", "testserver"])
# Demo mode: `demo_setup` creates the demo admin (admin/admin) and demo jobs only when it is on.
# `make run` sets SAS_DEMO=1; nothing else does (compose never).
SAS_DEMO = env_bool("SAS_DEMO", False)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    # Who is alive (issue 27): heartbeats, periodic tasks' last runs, queue depths, counters.
    "liveness",
    "scheduler",
    "agents",
    "supervisor",
    "orders",
    # Long-running work (issue 9): a paginated reprice of a product catalogue, and history
    # exports that heartbeat. Domain apps on the engine, beside orders.
    "catalogue",
    "exports",
    # Seed 004's reporting service: per-user reports and run timelines (reads only).
    "reports",
    # Jobs for people (seed 004): the API, pages and admin over the scheduler's job services.
    "jobs",
    # Operator tools that read every app (the engine-health page, the run admin's alerts and
    # order link); after the apps whose admins it extends.
    "ops",
]

MIDDLEWARE = [
    # Outermost: the Content-Security-Policy header on every response (issue 26).
    "sasproject.middleware.ContentSecurityPolicyMiddleware",
    # An overloaded database answers 503 + Retry-After wherever it surfaces (issue 7).
    "sasproject.middleware.DatabaseUnavailableMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A sign-in refused by the throttle answers 429/503 with Retry-After (login_throttle.py).
    "sasproject.login_throttle.LoginRefusalStatusMiddleware",
]

ROOT_URLCONF = "sasproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "sasproject.wsgi.application"

DATABASE_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/sasproject")
# Connections per process are bounded by configuration, never by load (issue 7: runserver's
# thread per request, each keeping its own connection, opened 96 and PostgreSQL refused
# everyone with "too many clients already"). Two ways, chosen per process by the environment:
# - DATABASE_POOL_MAX_SIZE > 0: a psycopg connection pool of that many connections per process,
#   shared by its threads (the web: gunicorn's threads borrow one per request and give it back at
#   the end of it; a request that waits longer than DATABASE_POOL_TIMEOUT for one gets a 503).
#   https://docs.djangoproject.com/en/5.2/ref/databases/#connection-pool
# - otherwise persistent connections, one per thread that uses the database: a Celery prefork
#   child runs one task at a time, so a worker holds at most its concurrency. A Celery worker
#   runs thousands of short tasks; reconnecting per task would dominate the cost of a step.
#   https://docs.djangoproject.com/en/5.2/ref/databases/#persistent-connections
# The bound of each process of `make run` and the figures behind the choice: docs/design.md,
# "Database connections".
DATABASE_POOL_MAX_SIZE = int(os.environ.get("DATABASE_POOL_MAX_SIZE", "0"))
DATABASES = {
    # Health checks drop a connection that PostgreSQL closed (restart, failover) instead of
    # failing the next task with it.
    "default": dj_database_url.parse(
        DATABASE_URL,
        conn_max_age=0 if DATABASE_POOL_MAX_SIZE else int(os.environ.get("DATABASE_CONN_MAX_AGE", "300")),
        conn_health_checks=True,
    ),
}
# Who holds a connection shows in pg_stat_activity.application_name (the Procfile names each
# process). https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-CONNECT-APPLICATION-NAME
DATABASES["default"].setdefault("OPTIONS", {})
DATABASES["default"]["OPTIONS"]["application_name"] = os.environ.get(
    "DATABASE_APPLICATION_NAME", "sasproject"
)
# A process cut off from the network inside a transaction (issue 22) keeps its PostgreSQL session
# "idle in transaction" - and its row locks - until the server notices the peer is gone: TCP
# keepalive, two hours by default, and never behind a proxy or pooler that stays up. A jobs
# dispatcher cut off mid-batch then holds its shard's row lock, and the shard is never taken over
# (shard_lease_take skips locked shards). With this set (seconds, 0 = off, PostgreSQL's default)
# the server ends such a session after that long idle in a transaction, rolling it back and
# releasing its locks. Set it above the longest pause a transaction makes between two statements
# (the engine's are milliseconds of Python), and at or under SAS_JOBS_DISPATCH_LEASE_SECONDS so a
# cut-off dispatcher's shard is taken over when its lease ends (tests/chaos/test_netns_live.py).
# https://www.postgresql.org/docs/current/runtime-config-client.html#GUC-IDLE-IN-TRANSACTION-SESSION-TIMEOUT
DATABASE_IDLE_IN_TRANSACTION_TIMEOUT = env_float("DATABASE_IDLE_IN_TRANSACTION_TIMEOUT", 0.0)
if DATABASE_IDLE_IN_TRANSACTION_TIMEOUT > 0:
    DATABASES["default"]["OPTIONS"]["options"] = (
        f"-c idle_in_transaction_session_timeout={int(DATABASE_IDLE_IN_TRANSACTION_TIMEOUT * 1000)}"
    )
if DATABASE_POOL_MAX_SIZE:
    # min_size connections are opened when the pool opens (first query) and kept; more up to
    # max_size on demand. https://www.psycopg.org/psycopg3/docs/api/pool.html
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": min(int(os.environ.get("DATABASE_POOL_MIN_SIZE", "1")), DATABASE_POOL_MAX_SIZE),
        "max_size": DATABASE_POOL_MAX_SIZE,
        "timeout": env_float("DATABASE_POOL_TIMEOUT", 5.0),
    }
DATABASES["default"].setdefault("TEST", {})
DATABASES["default"]["TEST"]["NAME"] = os.environ.get("DATABASE_TEST_NAME") or None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# Seconds a client is told to wait (Retry-After) when the database cannot serve its request.
SAS_WEB_RETRY_AFTER = int(os.environ.get("SAS_WEB_RETRY_AFTER", "2"))

STATIC_URL = "static/"
STATIC_ROOT = Path(os.environ.get("DJANGO_STATIC_ROOT") or BASE_DIR / ".staticfiles")

# --------------------------------------------------------------------------------------------
# --- production profile (issue 19): HTTPS, cookies, static files ---
# Every setting from the environment; the defaults are the production ones whenever DEBUG is off
# (`manage.py check --deploy` then only needs DJANGO_SECRET_KEY, DJANGO_SECURE_PROXY_SSL_HEADER
# behind a proxy, and DJANGO_SECURE_HSTS_PRELOAD). docker/production.env.example, docs/deploy.md.
# https://docs.djangoproject.com/en/5.2/ref/middleware/#module-django.middleware.security
# --------------------------------------------------------------------------------------------
# Plain HTTP is redirected to HTTPS (by the web; a proxy may do it first).
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
# ...except the probes, which load balancers, container healthchecks and Prometheus call over
# plain HTTP from inside (regular expressions on the path without its leading slash).
SECURE_REDIRECT_EXEMPT = env_list("DJANGO_SECURE_REDIRECT_EXEMPT", [r"^(healthz|readyz|metrics)/?$"])
# HSTS: browsers use HTTPS only, for this long (seconds; a year by default with DEBUG off), on
# subdomains too. Preload (the browsers' built-in list) is a commitment, so opt-in.
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS", "0" if DEBUG else "31536000"))
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD", False)
# Behind a proxy that terminates TLS: "HEADER,value" it sets on HTTPS requests, e.g.
# "HTTP_X_FORWARDED_PROTO,https". Unset by default: trusting a header that clients can send
# themselves (no proxy overwriting it) would make every request look secure.
# https://docs.djangoproject.com/en/5.2/ref/settings/#secure-proxy-ssl-header
_proxy_ssl_header = env_list("DJANGO_SECURE_PROXY_SSL_HEADER", [])
SECURE_PROXY_SSL_HEADER = (
    (_proxy_ssl_header[0], _proxy_ssl_header[1]) if len(_proxy_ssl_header) == 2 else None
)
# The proxy's X-Forwarded-Host as the request's host (only behind a proxy that sets it).
USE_X_FORWARDED_HOST = env_bool("DJANGO_USE_X_FORWARDED_HOST", False)
SECURE_CONTENT_TYPE_NOSNIFF = env_bool("DJANGO_SECURE_CONTENT_TYPE_NOSNIFF", True)
SECURE_REFERRER_POLICY = os.environ.get("DJANGO_SECURE_REFERRER_POLICY", "same-origin")
SECURE_CROSS_ORIGIN_OPENER_POLICY = os.environ.get("DJANGO_SECURE_CROSS_ORIGIN_OPENER_POLICY", "same-origin")
X_FRAME_OPTIONS = "DENY"
# Cookies: sent over HTTPS only with DEBUG off; the session cookie out of JavaScript's reach;
# SameSite=Lax (a link from another site keeps the session, a cross-site POST does not).
# The CSRF cookie stays readable (CSRF_COOKIE_HTTPONLY off by default; Django: no real gain).
SESSION_COOKIE_SECURE = env_bool("DJANGO_SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("DJANGO_CSRF_COOKIE_SECURE", not DEBUG)
SESSION_COOKIE_HTTPONLY = env_bool("DJANGO_SESSION_COOKIE_HTTPONLY", True)
CSRF_COOKIE_HTTPONLY = env_bool("DJANGO_CSRF_COOKIE_HTTPONLY", False)
SESSION_COOKIE_SAMESITE = os.environ.get("DJANGO_SESSION_COOKIE_SAMESITE", "Lax")
CSRF_COOKIE_SAMESITE = os.environ.get("DJANGO_CSRF_COOKIE_SAMESITE", "Lax")
# Origins (scheme://host[:port]) whose HTTPS POSTs pass the CSRF check when the proxy's Host
# differs from the browser's, e.g. "https://sas.example.com". Comma-separated.
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])

# Static files: whitenoise serves them from the web process itself, in every mode. With DEBUG
# off, from STATIC_ROOT as `collectstatic` wrote it (the image runs it at build): names carry a
# content hash and are served compressed with a year's cache; a missing file is an error at
# render, not a broken page. With DEBUG on (`make run`, the tests), straight from the apps'
# folders (no collectstatic). https://whitenoise.readthedocs.io/en/stable/django.html
_SECURITY_MIDDLEWARE = MIDDLEWARE.index("django.middleware.security.SecurityMiddleware")
MIDDLEWARE.insert(_SECURITY_MIDDLEWARE + 1, "whitenoise.middleware.WhiteNoiseMiddleware")
WHITENOISE_USE_FINDERS = DEBUG
WHITENOISE_AUTOREFRESH = DEBUG
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "login"

# --------------------------------------------------------------------------------------------
# --- logs (issue 19) ---
# One configuration for every process (web, workers, beat: sasproject/celery.py hands Celery's
# logging to it). LOG_FORMAT: text (`time LEVEL logger message`, `make run`'s) or json (one
# object per line; the engine's state changes carry run, step, lease, attempt, worker, event).
# LOG_EVENTS: those state-change lines (logger sas.events) at INFO; on by default with json.
# The periodic sweep, tick and dispatcher log nothing when they find nothing. sasproject/logs.py.
# --------------------------------------------------------------------------------------------
LOG_FORMAT = os.environ.get("LOG_FORMAT", "text").strip().lower() or "text"
LOGGING = logging_config(
    log_format=LOG_FORMAT,
    level=os.environ.get("LOG_LEVEL", "INFO"),
    events=env_bool("LOG_EVENTS", LOG_FORMAT == "json"),
)

# --------------------------------------------------------------------------------------------
# Celery. Every non-default setting says why. Reference:
# https://docs.celeryq.dev/en/stable/userguide/configuration.html
# --------------------------------------------------------------------------------------------
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")

# Redis by default; RabbitMQ (amqp://...) works as well: docs/deploy.md, "Broker". Empty counts
# as unset (docker/production.env.example lists it empty).
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or REDIS_URL
# No result backend: agents reply through the state store, never through AsyncResult, and
# storing results would only fill Redis. (task_ignore_result below.)
# (bench/ sets CELERY_RESULT_BACKEND to time the bare Celery round trip with AsyncResult.get().)
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_IGNORE_RESULT = True

# JSON only: tasks carry ids, leases and plain payloads; pickle would let a broker write run
# code. https://docs.celeryq.dev/en/stable/userguide/security.html#serializers
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True

# Ack after the task ran, not when it was received, so a worker that dies mid-task leaves the
# message to be delivered again. https://docs.celeryq.dev/en/stable/faq.html#faq-acks-late-vs-retry
CELERY_TASK_ACKS_LATE = True
# ...and when the pool child is killed (-9, OOM) the parent rejects+requeues instead of acking.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-reject-on-worker-lost
CELERY_TASK_REJECT_ON_WORKER_LOST = True
# One message in hand per process: with late acks a prefetched message waits behind a slow call
# and can run past its step deadline. https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# A lost broker connection cancels running late-ack tasks rather than letting them ack on a
# new connection that never delivered them (Celery 5.1+ recommended setting).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Never give up reconnecting to the broker. The default (100 retries, 2 s apart growing to 30 s)
# makes a worker exit with status 1 after ~47 minutes without Redis - the control worker is the
# supervisor, which must outlive a broker outage (tests/e2e/test_outage_live.py). None means
# retry forever (0 would mean "do not retry"): kombu.utils.functional.retry_over_time.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#broker-connection-max-retries
CELERY_BROKER_CONNECTION_MAX_RETRIES = None

# Time limits nest: an agent's per-call soft/hard limits are set at dispatch from the step's
# complete-by window (always below it); these global limits are the ceiling for any task, and the
# broker's visibility timeout sits above them all so Redis never redelivers a task that is still
# legitimately running. https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
CELERY_TASK_SOFT_TIME_LIMIT = int(os.environ.get("CELERY_TASK_SOFT_TIME_LIMIT", "240"))
CELERY_TASK_TIME_LIMIT = int(os.environ.get("CELERY_TASK_TIME_LIMIT", "300"))
# An optional key prefix isolates several deployments (or test sessions) on one Redis.
# https://docs.celeryq.dev/projects/kombu/en/stable/reference/kombu.transport.redis.html
REDIS_PREFIX = os.environ.get("SAS_REDIS_PREFIX", "")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "3600")),
}
if REDIS_PREFIX:
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = REDIS_PREFIX
# RabbitMQ's consumer_timeout (seconds; its default is 30 min): a delivery a consumer holds
# unacked longer closes the channel and is delivered again. With task_acks_late a message stays
# unacked for as long as its task runs, and an ETA/countdown message for as long as the worker
# waits for its time (Celery holds both unacked); Celery's worker exits when it fires. Ours stay
# far below it: the task time limit above (300 s), every step's window + 2 s (its hard limit),
# heartbeat steps acked when they start (agents/long.py), and the countdowns (kicks after a
# backoff, at most the *_BACKOFF_MAX settings; dispatcher wake-ups, under JOBS_DISPATCH_INTERVAL)
# - tests/deploy/test_brokers.py checks every one against this value and the machine's broker
# against it; tests/e2e/test_consumer_timeout_live.py fires it. Set it to your broker's
# consumer_timeout if you lowered it; never raise time limits or backoffs above it.
# https://www.rabbitmq.com/docs/consumers#acknowledgement-timeout
SAS_BROKER_CONSUMER_TIMEOUT = env_float("SAS_BROKER_CONSUMER_TIMEOUT", 1800.0)
# RabbitMQ only: "quorum" declares every queue a quorum queue (replicated over a RabbitMQ
# cluster, survives the loss of a minority of nodes) instead of a classic one. Quorum queues
# have no global QoS (Celery detects them and uses per-consumer prefetch:
# worker_detect_quorum_queues, on by default) and no x-max-priority (our priorities are applied
# when PostgreSQL hands out steps, not by the broker); countdowns then use RabbitMQ's native
# delayed delivery (Celery 5.5+), and publishes wait for the broker's confirm. Redis ignores it.
# https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/rabbitmq.html#using-quorum-queues
SAS_BROKER_QUEUE_TYPE = os.environ.get("SAS_BROKER_QUEUE_TYPE", "classic").strip() or "classic"
if SAS_BROKER_QUEUE_TYPE not in ("classic", "quorum"):
    raise ImproperlyConfigured(f"SAS_BROKER_QUEUE_TYPE is classic or quorum, not {SAS_BROKER_QUEUE_TYPE!r}")
CELERY_TASK_DEFAULT_QUEUE_TYPE = "classic"
if SAS_BROKER_QUEUE_TYPE == "quorum" and CELERY_BROKER_URL.startswith(("amqp", "pyamqp")):
    CELERY_TASK_DEFAULT_QUEUE_TYPE = "quorum"
    CELERY_TASK_CREATE_MISSING_QUEUE_TYPE = "quorum"
    CELERY_WORKER_DETECT_QUORUM_QUEUES = True
    CELERY_BROKER_TRANSPORT_OPTIONS["confirm_publish"] = True

# Explicit queues: one for the scheduler, one for the supervisor, one per remote service (so a
# slow payment provider cannot starve inventory calls). Routing is by task name prefix.
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = (
    # Agent operations `agents.<service>.<op>` go to queue `agent.<service>` (agents/routing.py).
    "agents.routing.route_agent_task",
    {
        # The jobs dispatcher has a worker of its own (Procfile `dispatcher`): a burst's tick
        # may write for seconds, and must not hold up the scheduler's kicks or the sweep.
        "scheduler.jobs_dispatch": {"queue": "jobs"},
        "scheduler.*": {"queue": "scheduler"},
        "supervisor.*": {"queue": "supervisor"},
        # The alert evaluator beside the supervisor; alert e-mails on the webhook agent's
        # worker (I/O threads), so a hanging SMTP server never holds up the control worker.
        "alerting.evaluate": {"queue": "supervisor"},
        "alerting.email_send": {"queue": "agent.webhook"},
        "bench.*": {"queue": "bench"},
    },
)
# Celery 5.6+ closes every database connection before and after each task (celery/celery#9824
# reverted honouring CONN_MAX_AGE): a new PostgreSQL connection, and a server backend fork, per
# step - the largest single cost of a step in the profile in bench/README.md. With DB_REUSE_MAX
# the fixup force-closes them only every N tasks; between tasks sasproject/celery.py applies
# Django's own rules instead (close_old_connections: CONN_MAX_AGE, CONN_HEALTH_CHECKS), exactly
# as Django does around a request. https://docs.djangoproject.com/en/5.2/ref/databases/#persistent-connections
CELERY_DB_REUSE_MAX = int(os.environ.get("CELERY_DB_REUSE_MAX", "1000"))
# Task events cost several broker publishes per task (received, started, succeeded - and
# "sent" from the producer), which is a quarter of a short step's broker traffic. They are off
# by default and Flower turns them on for as long as it watches: it broadcasts enable_events to
# the workers every few seconds (its --enable_events option, default on), so `make run` and the
# compose file, which start Flower, show live tasks. Set both to 1 to have them always on.
# https://docs.celeryq.dev/en/stable/userguide/monitoring.html#events
# https://flower.readthedocs.io/en/latest/config.html#enable-events
CELERY_WORKER_SEND_TASK_EVENTS = env_bool("CELERY_WORKER_SEND_TASK_EVENTS", False)
CELERY_TASK_SEND_SENT_EVENT = env_bool("CELERY_TASK_SEND_SENT_EVENT", False)

# django-celery-beat keeps the schedule in the database so operators edit intervals in the admin.
# https://django-celery-beat.readthedocs.io/en/latest/#usage
# Its DatabaseScheduler, subclassed so that beat (and with it the supervisor's sweep) survives a
# database outage longer than its 5-minute full re-read; see sasproject/beat.py.
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#beat-scheduler
CELERY_BEAT_SCHEDULER = "sasproject.beat:OutageTolerantDatabaseScheduler"
# How often beat re-reads the schedule; bounds how late a 1-second sweep can start.
CELERY_BEAT_MAX_LOOP_INTERVAL = 1

# --------------------------------------------------------------------------------------------
# The engine.
# --------------------------------------------------------------------------------------------
SAS: dict[str, Any] = {
    # How agents deliver replies: "inline" calls the scheduler's reply service in the agent's
    # process in one fenced transaction; "queue" sends a message to the scheduler queue.
    # Both are fenced by the lease. See bench/README.md for the measurement behind the default.
    "REPLY_MODE": os.environ.get("SAS_REPLY_MODE", "inline"),
    # Supervisor sweep and scheduler safety tick periods (seconds); written into the
    # django-celery-beat rows on setup, editable in the admin afterwards.
    "SUPERVISOR_INTERVAL": env_float("SAS_SUPERVISOR_INTERVAL", 1.0),
    "SCHEDULER_TICK_INTERVAL": env_float("SAS_SCHEDULER_TICK_INTERVAL", 2.0),
    "SWEEP_BATCH": int(os.environ.get("SAS_SWEEP_BATCH", "500")),
    # The jobs dispatcher (seed 004's Scheduler Service, scheduler/jobs.md): its beat period
    # (seconds; the django-celery-beat row, editable in the admin), rows per transaction, and
    # how long one tick may keep firing full batches (and at most how many): a burst is written
    # by one tick, not a few batches per beat period (bench/README.md, "Jobs").
    "JOBS_DISPATCH_INTERVAL": env_float("SAS_JOBS_DISPATCH_INTERVAL", 1.0),
    # The alert rules' evaluator's beat period (seconds; the "sas: alert rules" row). A tick
    # costs a few ms (bench/alerts.py), so it can run every few seconds.
    "ALERTS_INTERVAL": env_float("SAS_ALERTS_INTERVAL", 5.0),
    "JOBS_DISPATCH_BATCH": int(os.environ.get("SAS_JOBS_DISPATCH_BATCH", "1000")),
    "JOBS_DISPATCH_MAX_BATCHES": int(os.environ.get("SAS_JOBS_DISPATCH_MAX_BATCHES", "1000")),
    "JOBS_DISPATCH_TICK_SECONDS": env_float("SAS_JOBS_DISPATCH_TICK_SECONDS", 20.0),
    # Scale-out (issue 20): the due work is split into this many shards (a hash of the job); a
    # tick fires only the shards it holds a lease on, so K dispatcher processes on any hosts fire
    # K slices at once. More shards than dispatchers balance better (12 divides among 1, 2, 3, 4
    # and 6); each idle tick costs a few statements per shard. A lease lasts this many seconds
    # past its holder's last batch: a dispatcher killed mid-tick holds its shard no longer.
    "JOBS_DISPATCH_SHARDS": int(os.environ.get("SAS_JOBS_DISPATCH_SHARDS", "12")),
    # Shards one claim covers (leased together): a minute's rows in fewer, fuller batches (each
    # pays a claim's scan of the due index, a lease renewal and a commit), while K dispatchers up
    # to SHARDS / SHARDS_PER_CLAIM still each get groups of their own. 2 of 12 make 6 groups,
    # shared evenly by 1, 2, 3 or 6 dispatchers (groups of 4 split 2 dispatchers 2:1 - measured,
    # bench/README.md "Jobs").
    "JOBS_DISPATCH_SHARDS_PER_CLAIM": int(os.environ.get("SAS_JOBS_DISPATCH_SHARDS_PER_CLAIM", "2")),
    "JOBS_DISPATCH_LEASE_SECONDS": env_float("SAS_JOBS_DISPATCH_LEASE_SECONDS", 10.0),
    # The queue of the dispatcher's ticks (beat's row, the wake-ups and relays a tick sends).
    "JOBS_DISPATCH_QUEUE": os.environ.get("SAS_JOBS_DISPATCH_QUEUE", "jobs"),
    # More modules that register workflows at import (comma-separated dotted names), beside
    # the apps' own; see scheduler/apps.py.
    "WORKFLOW_MODULES": [m for m in os.environ.get("SAS_WORKFLOW_MODULES", "").split(",") if m.strip()],
    # Test only: seconds the dispatcher sleeps between its claim and its commit, so a crash
    # test can kill it there. 0 in every real deployment.
    "JOBS_TEST_PAUSE_AFTER_CLAIM": env_float("SAS_JOBS_TEST_PAUSE_AFTER_CLAIM", 0.0),
    "CLAIM_BATCH": int(os.environ.get("SAS_CLAIM_BATCH", "100")),
    # Backpressure: at most this many steps of one agent operation Processing at once, for an
    # operation whose queue has no BULKHEAD_SLOTS entry.
    "MAX_IN_FLIGHT_PER_OPERATION": int(os.environ.get("SAS_MAX_IN_FLIGHT", "50")),
    # Bulkheads' slots (issue 26, docs/fairness.md): at most this many steps of an agent queue
    # Processing at once - its workers' threads, so nothing waits in the broker's FIFO queue and
    # the fair claim, not the broker, decides who runs next. The Procfile's and compose's `-c`
    # of the queue's worker (tests/scheduler/test_bulkheads.py pins them); a queue not listed gets
    # MAX_IN_FLIGHT_PER_OPERATION. catalogue and exports share longjobs' 2.
    # Environment: SAS_BULKHEAD_SLOTS="agent.http=16,agent.tasks=4" (over these defaults).
    "BULKHEAD_SLOTS": env_slots(
        "SAS_BULKHEAD_SLOTS",
        {
            "agent.inventory": 8,
            "agent.payment": 8,
            "agent.shipping": 8,
            "agent.webhook": 8,
            "agent.http": 8,
            "agent.tasks": 2,
            "agent.catalogue": 2,
            "agent.exports": 2,
        },
    ),
    # The most of a bulkhead's slots one owner may hold: ceil(slots x share), at least 1. Below
    # 1 it keeps slots free for whoever comes next, so a newcomer starts at once rather than when
    # one of a flooding owner's calls ends (a 20 s call, for http); the price is a lone owner's
    # burst running on that share (docs/decisions.md, "A bulkhead's share per owner"). 1: none.
    "BULKHEAD_OWNER_SHARE": env_float("SAS_BULKHEAD_OWNER_SHARE", 0.75),
    # A step that a reply claims runs in place, with no broker hop, when the replying worker
    # serves its queue: at most this many per task (0: off). agents/eager.py.
    "EAGER_STEPS": int(os.environ.get("SAS_EAGER_STEPS", "8")),
    # Schedule-to-start (issue 18, docs/fairness.md): seconds a job occurrence's run may wait
    # for its first step to be claimed; past it the supervisor skips the occurrence (run
    # Cancelled, a "skipped: not started within N s (backlog)" job history row). A workflow may
    # set its own (`Workflow.schedule_to_start`); orders never expire. 0: never.
    "SCHEDULE_TO_START": env_float("SAS_SCHEDULE_TO_START", 300.0),
    # Claim a new run's first step in the submit transaction when there is room (no kick hop).
    "CLAIM_ON_SUBMIT": env_bool("SAS_CLAIM_ON_SUBMIT", True),
    # Circuit breaker (per remote service, shared by all workers through Redis).
    "BREAKER_FAILURE_THRESHOLD": int(os.environ.get("SAS_BREAKER_FAILURE_THRESHOLD", "5")),
    "BREAKER_RESET_TIMEOUT": env_float("SAS_BREAKER_RESET_TIMEOUT", 5.0),
    "BREAKER_REDIS_URL": os.environ.get("SAS_BREAKER_REDIS_URL", REDIS_URL),
    # At most this much of a remote service's answer is read (the call's total deadline bounds
    # the time): a larger answer is a transient fault (agents/outbound.py).
    "REMOTE_RESPONSE_MAX_BYTES": int(os.environ.get("SAS_REMOTE_RESPONSE_MAX_BYTES", str(1024 * 1024))),
    # The largest JSON an engine message may carry as an agent request's payload or a reply's
    # result; a larger one is dropped unread (scheduler/messages.py). Above the remote answer's
    # limit, whose parsed body a success reply carries.
    "MESSAGE_MAX_BYTES": int(os.environ.get("SAS_MESSAGE_MAX_BYTES", str(2 * 1024 * 1024))),
    # Where the remote services live. The simulator serves all three under one base URL.
    "REMOTE_URLS": {
        "inventory": os.environ.get(
            "SAS_INVENTORY_URL", os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
        ),
        "payment": os.environ.get(
            "SAS_PAYMENT_URL", os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
        ),
        "shipping": os.environ.get(
            "SAS_SHIPPING_URL", os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
        ),
    },
}
if not 0 < SAS["BULKHEAD_OWNER_SHARE"] <= 1:
    raise ImproperlyConfigured(
        f"SAS_BULKHEAD_OWNER_SHARE is a fraction above 0 and at most 1, not {SAS['BULKHEAD_OWNER_SHARE']!r}"
    )

# --------------------------------------------------------------------------------------------
# Job targets (issue 8): HTTP-call jobs and @schedulable tasks. See docs/jobs-targets.md.
# --------------------------------------------------------------------------------------------
# The egress policy (issue 18; agents/egress.py, docs/jobs-targets.md "The egress policy"): where
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

# The order workflow's step policy (seconds / attempts). Short windows in tests come from here.
SAS["ORDER_STEP_TIMEOUT"] = env_float("SAS_ORDER_STEP_TIMEOUT", 10.0)
SAS["ORDER_MAX_FAILURES"] = int(os.environ.get("SAS_ORDER_MAX_FAILURES", "3"))
SAS["ORDER_BACKOFF_BASE"] = env_float("SAS_ORDER_BACKOFF_BASE", 0.5)
SAS["ORDER_BACKOFF_MAX"] = env_float("SAS_ORDER_BACKOFF_MAX", 10.0)
# How long a dispatched step may wait for an agent to start it (workers down, busy, restarting)
# before it is sent again - no failure counted (Temporal's schedule-to-start).
SAS["ORDER_QUEUE_TIMEOUT"] = env_float("SAS_ORDER_QUEUE_TIMEOUT", 10.0)
# The whole step's deadline (Temporal's schedule-to-close): minutes, so an outage of a service
# is waited out; past it the order is compensated. Attempts that reached the service and failed
# are bounded by ORDER_MAX_FAILURES; deferrals (breaker open) and requeues are not.
SAS["ORDER_STEP_DEADLINE"] = env_float("SAS_ORDER_STEP_DEADLINE", 300.0)
# Compensations never give up on their own: they retry with backoff capped here and alert an
# operator after ORDER_COMPENSATION_ALERT_AFTER failures.
SAS["ORDER_COMPENSATION_BACKOFF_MAX"] = env_float("SAS_ORDER_COMPENSATION_BACKOFF_MAX", 30.0)
SAS["ORDER_COMPENSATION_ALERT_AFTER"] = int(os.environ.get("SAS_ORDER_COMPENSATION_ALERT_AFTER", "6"))

# Long steps (issue 9). The catalogue reprice is paginated: rows per page, one page's window
# (an attempt each), how long a page may wait for an agent; the demo paces each page (seconds,
# inside its transaction) so a person can watch the bar move - 0 for full speed.
SAS["CATALOGUE_PAGE_SIZE"] = int(os.environ.get("SAS_CATALOGUE_PAGE_SIZE", "1000"))
SAS["CATALOGUE_PAGE_TIMEOUT"] = env_float("SAS_CATALOGUE_PAGE_TIMEOUT", 10.0)
SAS["CATALOGUE_QUEUE_TIMEOUT"] = env_float("SAS_CATALOGUE_QUEUE_TIMEOUT", 10.0)
SAS["CATALOGUE_PAGE_DELAY"] = env_float("SAS_CATALOGUE_PAGE_DELAY", 0.2)
# The history export heartbeats: each heartbeat extends its deadline by EXPORT_HEARTBEAT seconds
# (its agent beats every third of that); the whole export may take up to EXPORT_DEADLINE. The
# demo paces an export to take at least EXPORT_MIN_SECONDS (a minute), like a real long job.
SAS["EXPORT_HEARTBEAT"] = env_float("SAS_EXPORT_HEARTBEAT", 10.0)
SAS["EXPORT_QUEUE_TIMEOUT"] = env_float("SAS_EXPORT_QUEUE_TIMEOUT", 10.0)
SAS["EXPORT_DEADLINE"] = env_float("SAS_EXPORT_DEADLINE", 900.0)
SAS["EXPORT_MIN_SECONDS"] = env_float("SAS_EXPORT_MIN_SECONDS", 60.0)
# How much of a step's output (a task's return value, an HTTP answer's body) the run page, the
# runs API and the progress API show; the rest is a download for its owner (issue 28,
# scheduler/outputs.py). Bytes of UTF-8 text.
SAS["OUTPUT_EXCERPT_BYTES"] = int(os.environ.get("SAS_OUTPUT_EXCERPT_BYTES", "2048"))

# --------------------------------------------------------------------------------------------
# --- web and API (issue 3) ---
# The order pages, the JSON API (Django REST framework, OpenAPI by drf-spectacular) and
# webhooks. Everything below is owned by that feature; see docs/api.md and docs/web.md.
# --------------------------------------------------------------------------------------------
# API tokens are sasproject.tokens' (hashed, expiring; issue 26), not DRF's authtoken (clear keys):
# its migration moved the old keys over and dropped DRF's table.
INSTALLED_APPS += ["rest_framework", "sasproject.tokens", "drf_spectacular", "webhooks"]

# The cache backs the API rate limits, so it must be shared by every web process: Redis.
# https://docs.djangoproject.com/en/5.2/topics/cache/#redis
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": os.environ.get("CACHE_REDIS_URL", REDIS_URL),
        "KEY_PREFIX": f"{REDIS_PREFIX}cache",
    }
}

# Request bodies above this are refused (the API answers 413). An order is a few kB at most.
# https://docs.djangoproject.com/en/5.2/ref/settings/#data-upload-max-memory-size
DATA_UPLOAD_MAX_MEMORY_SIZE = int(os.environ.get("SAS_MAX_BODY_BYTES", str(64 * 1024)))

# JSON from users (API bodies, the pages' and admin's JSON fields) nested deeper than this is
# refused with a 400 / form error (sasproject/json_input.py): Python's parser recurses per level,
# and ~1,000 levels (a 2 kB body) exhausted the stack (issue 18). An order nests 3 deep.
SAS_JSON_MAX_DEPTH = int(os.environ.get("SAS_JSON_MAX_DEPTH", "32"))

# https://www.django-rest-framework.org/api-guide/settings/
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["sasproject.tokens.authentication.HashedTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's JSON parser with a depth limit, no NUL, no NaN and the body size limit.
    "DEFAULT_PARSER_CLASSES": ["sasproject.json_input.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "sasproject.api_input.PageNumberPagination",
    "PAGE_SIZE": 20,
    # drf-spectacular's, plus additionalProperties: false for inputs that refuse unknown fields.
    "DEFAULT_SCHEMA_CLASS": "sasproject.api_schema.AutoSchema",
    "EXCEPTION_HANDLER": "orders.api_base.exception_handler",
}

# https://drf-spectacular.readthedocs.io/en/latest/settings.html
SPECTACULAR_SETTINGS = {
    "TITLE": "sasproject API",
    "DESCRIPTION": "Submit orders, follow their runs, cancel them; schedule jobs (one-off and cron). "
    "See docs/api.md.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # The schema is public (it documents, it grants nothing).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "orders.schema.order_items_length",
        "sasproject.api_schema.document_common_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "RunStateEnum": "scheduler.models.RunState",
        "StepStateEnum": "scheduler.models.StepState",
    },
}

# API tokens expire this many days after they are made (docs/api.md "Authentication").
SAS_API_TOKEN_DAYS = int(os.environ.get("SAS_API_TOKEN_DAYS", "90"))

# Order submissions per user (web form and API share the budget), DRF rate syntax: N/second,
# N/minute, N/hour, N/day. Read at request time, so tests can override it.
SAS_SUBMIT_RATE = os.environ.get("SAS_SUBMIT_RATE", "60/minute")

# Sign-in throttling (issue 22, rebuilt in issue 26; sasproject/login_throttle.py): every attempt
# on the site's and the admin's sign-in forms is counted in Redis BEFORE its password is checked,
# atomically; past a limit it is refused (429, the password never checked) until the window that
# started at the first failure ends. Keyed so nobody can lock out everyone (docs/decisions.md):
# per (username, address) and per address lock; per username over all addresses and over the
# whole site only slow down addresses that have not signed in to that name before. 0 disables a
# limit. Redis down: sign-in refused with 503 (fails closed).
SAS_LOGIN_THROTTLE: dict[str, int] = {
    # Failures of one username from one address.
    "FAILURES_PER_USERNAME": int(os.environ.get("SAS_LOGIN_FAILURES_PER_USERNAME", "5")),
    # Failures from one address, all usernames.
    "FAILURES_PER_IP": int(os.environ.get("SAS_LOGIN_FAILURES_PER_IP", "20")),
    "WINDOW": int(os.environ.get("SAS_LOGIN_WINDOW", "900")),  # seconds
    # Past this many failures of one username (all addresses) / of the whole site in the window,
    # addresses new to the username get one password check per NAME_PACE_MS / SITE_PACE_MS.
    "SLOW_PER_USERNAME": int(os.environ.get("SAS_LOGIN_SLOW_PER_USERNAME", "20")),
    "SLOW_SITE": int(os.environ.get("SAS_LOGIN_SLOW_SITE", "300")),
    "NAME_PACE_MS": int(os.environ.get("SAS_LOGIN_NAME_PACE_MS", "2000")),
    "SITE_PACE_MS": int(os.environ.get("SAS_LOGIN_SITE_PACE_MS", "100")),
    # An address a username signed in from is "known" to it (not slowed) for this many days.
    "KNOWN_DAYS": int(os.environ.get("SAS_LOGIN_KNOWN_DAYS", "30")),
}
# The client's address behind proxies (sasproject/login_throttle.py client_address): the number
# of trusted proxies in front, each appending the address it was reached from to the header
# (the compose nginx sets `X-Forwarded-For $remote_addr`: 1). 0: REMOTE_ADDR, for a site reached
# directly. Set it only behind proxies that overwrite or append the header - otherwise a client
# picks its own address. docs/deploy.md.
SAS_TRUSTED_PROXY_HOPS = int(os.environ.get("SAS_TRUSTED_PROXY_HOPS", "0"))
SAS_TRUSTED_PROXY_HEADER = os.environ.get("SAS_TRUSTED_PROXY_HEADER", "X-Forwarded-For")

# Fair share per owner (issue 18, docs/api.md "Limits"). Every path that creates work - pages
# and API alike - takes a token from its scope's budget per user (scheduler/limits.py: one
# Redis-backed limiter, a burst of N then one every period/N). A scope left empty uses
# SAS_SUBMIT_RATE. Read at request time. Refused: 429 with Retry-After (API), a form error
# naming the limit (pages); nothing is written.
SAS_RATES: dict[str, str] = {
    # Orders placed (page and API).
    "order_submit": os.environ.get("SAS_ORDER_RATE", ""),
    # Job creations, edits, "run now"s and backfills (pages and API).
    "job_write": os.environ.get("SAS_JOB_WRITE_RATE", ""),
    # History exports requested (page and API): each reads all of the user's history.
    "export": os.environ.get("SAS_EXPORT_RATE", "20/hour"),
    # Catalogue reprices requested (page).
    "reprice": os.environ.get("SAS_REPRICE_RATE", "10/hour"),
}

# Per-user quotas, counted under a per-owner advisory lock in the services that create the
# work (scheduler/limits.py), so concurrent requests cannot overshoot. 0 = no limit.
SAS_QUOTAS: dict[str, int] = {
    # Jobs not finished (enabled or paused) per owner: job create, and an edit that re-arms one.
    "ACTIVE_JOBS": int(os.environ.get("SAS_QUOTA_ACTIVE_JOBS", "100")),
    # Runs Pending or Running per owner: orders, exports, reprices, "run now"; a scheduled
    # occurrence of a user over it is skipped with a history row that says so.
    "RUNS_IN_FLIGHT": int(os.environ.get("SAS_QUOTA_RUNS_IN_FLIGHT", "200")),
    # Exports not finished per owner.
    "EXPORTS_IN_FLIGHT": int(os.environ.get("SAS_QUOTA_EXPORTS_IN_FLIGHT", "2")),
}

# The webhook_delivery workflow's step policy: one attempt's window, attempts before giving up,
# backoff between attempts (seconds).
SAS_WEBHOOKS = {
    "STEP_TIMEOUT": env_float("SAS_WEBHOOK_STEP_TIMEOUT", 10.0),
    "MAX_FAILURES": int(os.environ.get("SAS_WEBHOOK_MAX_FAILURES", "5")),
    "BACKOFF_BASE": env_float("SAS_WEBHOOK_BACKOFF_BASE", 1.0),
    "BACKOFF_MAX": env_float("SAS_WEBHOOK_BACKOFF_MAX", 60.0),
}

# No SAS_TEST_TRUNCATE entry for the webhooks tables: they reference scheduler_run, so the test
# fixtures' `TRUNCATE ... CASCADE` of the engine tables empties them anyway, and locks them after
# the engine tables - the order a worker's transaction takes them in (naming them first could
# deadlock with a worker that is still recording an event).

# --------------------------------------------------------------------------------------------
# Monitoring (issue 19): /healthz, /readyz, /metrics (ops/), Flower, the engine-health page.
# See docs/operators.md ("Monitoring") and docs/decisions.md ("Metrics read at scrape time").
# --------------------------------------------------------------------------------------------
# Every queue the engine's tasks are routed to (CELERY_TASK_ROUTES, agents/routing.py), declared
# explicitly so that /metrics, the health page and Flower's broker page list each of them even
# before a worker has consumed it (Flower falls back to task_queues when it knows no workers).
# tests/ops/test_queues.py checks that every registered task's queue is here. Each Queue is the
# one Celery would create for a missing name (an exchange of the queue's name, direct, routing
# key = name), so routing and existing deployments are unchanged. (A worker started without -Q
# would now consume every queue listed here rather than only "default"; every worker of the
# Procfile, the compose file, the tests and the benches names its queues.)
# https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-queues
SAS_QUEUES = [
    "scheduler",
    "supervisor",
    "default",
    "jobs",
    "agent.inventory",
    "agent.payment",
    "agent.shipping",
    "agent.webhook",
    "agent.http",
    "agent.tasks",
    "agent.catalogue",
    "agent.exports",
    "bench",
]


def _celery_queues() -> list[Any]:
    from kombu import Exchange, Queue

    # Quorum queues (SAS_BROKER_QUEUE_TYPE above, RabbitMQ only) are declared with their type,
    # behind topic exchanges: Celery's native delayed delivery (a countdown waits in RabbitMQ's
    # celery_delayed_* exchanges, not unacked in a worker) binds only topic exchanges - on a
    # direct one kombu warns "ETA tasks published to this exchange will block the worker".
    # Routing is unchanged: each queue's key is its own name. (Classic queues keep their direct
    # exchanges: RabbitMQ refuses to redeclare an existing exchange with another type.)
    # https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/rabbitmq.html#native-delayed-delivery
    quorum = CELERY_TASK_DEFAULT_QUEUE_TYPE == "quorum"
    arguments = {"x-queue-type": "quorum"} if quorum else None
    kind = "topic" if quorum else "direct"
    return [
        Queue(name, Exchange(name, type=kind), routing_key=name, queue_arguments=arguments)
        for name in SAS_QUEUES
    ]


CELERY_TASK_QUEUES = _celery_queues()

SAS_MONITORING: dict[str, Any] = {
    # The engine's own counters and histograms (step attempts by outcome, step latency and
    # schedule-to-start, supervisor recoveries), written to Redis by the process where they
    # happen - one pipelined round trip per attempt - and read by /metrics. 0 turns the writes
    # off (bench/engine.py measures the cost with them on and off).
    "METRICS": env_bool("SAS_METRICS", True),
    # /metrics answers only with one of these credentials: `Authorization: Bearer <token>`, or
    # HTTP basic auth as "user:password". Neither set: /metrics refuses every request (401).
    "METRICS_TOKEN": os.environ.get("SAS_METRICS_TOKEN", ""),
    "METRICS_BASIC_AUTH": os.environ.get("SAS_METRICS_BASIC_AUTH", ""),
    # Each worker writes "alive, consuming these queues" into Redis every CONSUMER_HEARTBEAT
    # seconds (liveness/heartbeat.py); a consumer not heard from for CONSUMER_STALE
    # seconds counts as gone (a frozen or killed worker). The health page and /metrics read them.
    "CONSUMER_HEARTBEAT": env_float("SAS_CONSUMER_HEARTBEAT", 5.0),
    "CONSUMER_STALE": env_float("SAS_CONSUMER_STALE", 15.0),
    # Flower's address for the admin's link (empty: no link).
    "FLOWER_URL": os.environ.get(
        "SAS_FLOWER_URL", "http://127.0.0.1:" + os.environ.get("FLOWER_PORT", "5555")
    ),
}

# --------------------------------------------------------------------------------------------
# Alerting (issue 21): alert rules evaluated from the database, e-mail and signed webhooks.
# docs/operators.md#alerts. The rules themselves are rows (admin: Supervisor > Alert rules).
# --------------------------------------------------------------------------------------------
INSTALLED_APPS += ["alerting"]
# Off: neither beat's tick nor the watchdog evaluates (the test suite's shared workers run with
# it off so that background alerts never meet another test's assertions).
SAS_ALERTS_ENABLED = env_bool("SAS_ALERTS_ENABLED", True)
# At most this many enabled rules are evaluated per tick (bounded cost; by id).
SAS_ALERT_MAX_RULES = int(os.environ.get("SAS_ALERT_MAX_RULES", "500"))
# The control worker's watchdog checks the evaluator this often (alerting/watchdog.py). Workers'
# heartbeats per queue are SAS_MONITORING["CONSUMER_HEARTBEAT"]'s (liveness/heartbeat.py).
SAS_ALERT_HEARTBEAT_INTERVAL = env_float("SAS_ALERT_HEARTBEAT_INTERVAL", 2.0)
# Start-up grace (seconds): after the evaluator's process starts, the dead man's switch
# ("Supervisor / Jobs dispatcher not running") and "a queue with work and no consumer" are not
# evaluated for this long - a clean restart pages nobody (docs/operators.md#alerts, issue 27).
SAS_ALERT_STARTUP_GRACE = env_float("SAS_ALERT_STARTUP_GRACE", 60.0)
# The site's public address (scheme://host[:port], no path), for links in alert e-mails to the
# alert, the job and its runs. Empty: the e-mails carry no links (docs/operators.md#alerts).
SAS_PUBLIC_URL = os.environ.get("SAS_PUBLIC_URL", "")
# Queues the "queue with work and no consumer" rule watches when the rule names none.
SAS_ALERT_QUEUES = env_list("SAS_ALERT_QUEUES", [q for q in SAS_QUEUES if q != "bench"])
# Tasks whose completions are recorded (liveness/last_run.py: the health page, /metrics and the
# dead man's switch read it) - the periodic rows' tasks.
SAS_ALERT_WATCHED_TASKS = frozenset(
    ["supervisor.sweep", "scheduler.tick", "scheduler.jobs_dispatch", "alerting.evaluate"]
)
# The operators' alert webhook: its default URL (a rule may name its own), the secret that signs
# it (X-SAS-Signature, as webhooks/signing.py), and its egress policy's lists (agents/egress.py):
# an incident tool is often on a private address - name it in the PRIVATE list.
SAS_ALERT_WEBHOOK_URL = os.environ.get("SAS_ALERT_WEBHOOK_URL", "")
# No default (issue 26): unset, operator alert webhooks are not sent - logged, and a system check
# warns when SAS_ALERT_WEBHOOK_URL is set - never signed with DJANGO_SECRET_KEY, whose holder
# could then forge an alert and whose leak would forge sessions too. `make run`: devservices env
# makes one per checkout (.devdata/alert-webhook-secret).
SAS_ALERT_WEBHOOK_SECRET = os.environ.get("SAS_ALERT_WEBHOOK_SECRET", "")
SAS_ALERT_WEBHOOK_ALLOWED_HOSTS = env_list("SAS_ALERT_WEBHOOK_ALLOWED_HOSTS", ["*"])
SAS_ALERT_WEBHOOK_PRIVATE_HOSTS = env_list("SAS_ALERT_WEBHOOK_PRIVATE_HOSTS", [])

# E-mail through Django's backends. https://docs.djangoproject.com/en/5.2/topics/email/
# `make run` sets the file backend and EMAIL_FILE_PATH=.devdata/mail (each message a file);
# production sets the SMTP backend and host. EMAIL_TIMEOUT bounds a hanging server.
EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_FILE_PATH = os.environ.get("EMAIL_FILE_PATH", str(BASE_DIR / ".devdata" / "mail"))
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = int(os.environ.get("EMAIL_PORT", "25"))
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = os.environ.get("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = int(os.environ.get("EMAIL_TIMEOUT", "10"))
EMAIL_SUBJECT_PREFIX = os.environ.get("EMAIL_SUBJECT_PREFIX", "[sasproject] ")
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "alerts@sasproject.localhost")
SERVER_EMAIL = DEFAULT_FROM_EMAIL
# Who operator alerts go to when a rule lists nobody: "Name <a@b>, c@d" (comma-separated).
ADMINS = [
    (address.split("<")[0].strip() or address, address.split("<")[-1].rstrip(">").strip())
    for address in env_list("SAS_ADMINS", ["ops@sasproject.localhost"])
]
# A customer has at most this many alert rules (each is evaluated every few seconds).
SAS_ALERT_RULES_PER_USER = int(os.environ.get("SAS_ALERT_RULES_PER_USER", "20"))

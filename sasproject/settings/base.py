"""The Django project itself: apps, middleware, templates, the database, time zone, static
files, sign-in URLs and logs - what every process needs whatever its profile."""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url

from sasproject.logs import logging_config
from sasproject.settings.env import env_bool, env_float
from sasproject.workflow_apps import workflow_apps_found

BASE_DIR = Path(__file__).resolve().parent.parent.parent

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
    # The web and the JSON API (settings/web.py). API tokens are sasproject.tokens' (hashed,
    # expiring; issue 26), not DRF's authtoken (clear keys): its migration moved the old keys
    # over and dropped DRF's table.
    "rest_framework",
    "sasproject.tokens",
    "drf_spectacular",
    "webhooks",
    # Alerting (issue 21, settings/alerting.py).
    "alerting",
    # Django's task framework (the django-tasks backport of Django 6's django.tasks) and its
    # backend on the engine (issue 31 item 4): TASKS in settings/domains.py.
    "django_tasks",
    "tasksbackend",
]
# Workflow apps found in the tree (issue 31): a top-level package with apps.py and workflows.py
# (what `manage.py startworkflow NAME` writes) is installed by being there, after the apps above.
# sasproject/workflow_apps.py; docs/developing/workflows.md.
SAS_WORKFLOW_APPS = workflow_apps_found(root=BASE_DIR, listed=INSTALLED_APPS)
INSTALLED_APPS += SAS_WORKFLOW_APPS

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
                # Issue 30: a paused account's banner on every customer page.
                "jobs.account.account_pause",
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
# Behind a pooler (issue 29 item 4; docs/deploying/deploy.md, "Through a pooler"): DATABASE_URL
# names PgBouncer in TRANSACTION mode, which hands each transaction whichever server connection
# is free, and DATABASE_DIRECT_URL names PostgreSQL itself. Nothing may then rely on a session
# through DATABASE_URL:
# - what needs one (a session advisory lock held across transactions: the alert evaluator's)
#   uses the "direct" alias (sasproject/database.py, `session_connection`); a process that never
#   asks for it never opens it;
# - the startup parameter `options` (idle_in_transaction_session_timeout above) is refused by
#   PgBouncer ("unsupported startup parameter"): it goes to the direct alias only, and the jobs
#   dispatcher sets the timeout per transaction instead (`transaction_idle_limit`);
# - no server-side cursors through it (QuerySet.iterator() outside a transaction declares one
#   WITH HOLD, which would outlive the transaction's server connection; the history export
#   streams on the direct alias instead): https://docs.djangoproject.com/en/5.2/ref/databases/#transaction-pooling-and-server-side-cursors
# - no prepared statements: Django's psycopg backend sets prepare_threshold=None unless OPTIONS
#   says otherwise; stated here so that nobody turns them on through the pooler (PgBouncer 1.18,
#   Debian 12's, cannot follow a prepared statement across server connections).
# Everything else the platform does in SQL is transaction-scoped: pg_advisory_xact_lock (quotas,
# concurrency keys, the alert rule cap), SET LOCAL / set_config(..., true), row locks.
DATABASE_DIRECT_URL = os.environ.get("DATABASE_DIRECT_URL", "").strip()
if DATABASE_DIRECT_URL:
    DATABASES["direct"] = dj_database_url.parse(
        DATABASE_DIRECT_URL,
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "300")),
        conn_health_checks=True,
    )
    DATABASES["direct"]["OPTIONS"] = {
        key: value for key, value in DATABASES["default"]["OPTIONS"].items() if key != "pool"
    }
    # Tests: the direct alias is the same test database as the default.
    DATABASES["direct"]["TEST"] = {"MIRROR": "default"}
    DATABASES["default"]["OPTIONS"].pop("options", None)
    DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

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

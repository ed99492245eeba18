"""The web and the JSON API (issue 3): REST framework, OpenAPI, caches, body limits, tokens,
sign-in throttling, rates and quotas, and webhooks."""

from __future__ import annotations

import os

from sasproject.settings.celery_conf import REDIS_PREFIX, REDIS_URL
from sasproject.settings.env import env_float

# --------------------------------------------------------------------------------------------
# --- web and API (issue 3) ---
# The order pages, the JSON API (Django REST framework, OpenAPI by drf-spectacular) and
# webhooks. Everything below is owned by that feature; see docs/using/api.md and docs/using/web.md.
# --------------------------------------------------------------------------------------------

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
    "See docs/using/api.md.",
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

# API tokens expire this many days after they are made (docs/using/api.md "Authentication").
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
# picks its own address. docs/deploying/deploy.md.
SAS_TRUSTED_PROXY_HOPS = int(os.environ.get("SAS_TRUSTED_PROXY_HOPS", "0"))
SAS_TRUSTED_PROXY_HEADER = os.environ.get("SAS_TRUSTED_PROXY_HEADER", "X-Forwarded-For")

# Fair share per owner (issue 18, docs/using/api.md "Limits"). Every path that creates work - pages
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

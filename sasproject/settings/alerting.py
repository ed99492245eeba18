"""Alerting (issue 21): the evaluator, its delivery by e-mail and signed webhooks, and mail."""

from __future__ import annotations

import os

from sasproject.settings.base import BASE_DIR
from sasproject.settings.env import env_bool, env_float, env_list
from sasproject.settings.monitoring import SAS_QUEUES

# --------------------------------------------------------------------------------------------
# Alerting (issue 21): alert rules evaluated from the database, e-mail and signed webhooks.
# docs/operating/operators.md#alerts. The rules themselves are rows (admin: Supervisor > Alert rules).
# --------------------------------------------------------------------------------------------
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
# evaluated for this long - a clean restart pages nobody (docs/operating/operators.md#alerts, issue 27).
SAS_ALERT_STARTUP_GRACE = env_float("SAS_ALERT_STARTUP_GRACE", 60.0)
# The site's public address (scheme://host[:port], no path), for links in alert e-mails to the
# alert, the job and its runs. Empty: the e-mails carry no links (docs/operating/operators.md#alerts).
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

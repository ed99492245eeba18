"""The production profile (issue 19): DEBUG, the secret key, hosts, HTTPS, cookies and static
file storage - safe by default, loosened only by the environment (docs/deploying/deploy.md)."""

from __future__ import annotations

import os

from django.core.exceptions import ImproperlyConfigured

from sasproject.settings.base import MIDDLEWARE
from sasproject.settings.env import env_bool, env_list

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

# --------------------------------------------------------------------------------------------
# --- production profile (issue 19): HTTPS, cookies, static files ---
# Every setting from the environment; the defaults are the production ones whenever DEBUG is off
# (`manage.py check --deploy` then only needs DJANGO_SECRET_KEY, DJANGO_SECURE_PROXY_SSL_HEADER
# behind a proxy, and DJANGO_SECURE_HSTS_PRELOAD). docker/production.env.example, docs/deploying/deploy.md.
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

"""A database that cannot serve a request right now answers 503 with Retry-After, never 500; and
every response carries a Content-Security-Policy (at the end of this module).

"Cannot serve right now" is a django.db OperationalError or InterfaceError: no connection
(PostgreSQL refused it - "too many clients already", shutting down, unreachable - or the
process's connection pool had none free within DATABASE_POOL_TIMEOUT), or the statement was
cut off by the server (deadlock, cancellation, lost connection). Each leaves nothing behind: a
transaction it interrupted rolls back. Programming and integrity errors stay 500s.

The API answers JSON in its error shape (`{"detail", "code"}`), pages a plain page. A client
that retries a POST with its Idempotency-Key gets its one order (docs/using/api.md).

Two hooks, because Django turns an exception into a 500 response at every middleware layer:
- `process_exception` answers for an exception raised by a view (DRF re-raises the ones its
  handler does not know), the usual place: the first query of a request is in the view;
- an exception raised in another middleware (the session saved in SessionMiddleware's
  process_response) reaches Django's `got_request_exception` signal: the receiver marks the
  request, and this middleware, the outermost, replaces the 500 with the 503.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

logger = logging.getLogger(__name__)

_MARK = "_sas_database_unavailable"


def database_unavailable(exc: BaseException | None) -> bool:
    """True for the errors that mean "the database cannot do it now; try again"."""
    return isinstance(exc, OperationalError | InterfaceError)


def retry_after_seconds() -> int:
    return int(getattr(settings, "SAS_WEB_RETRY_AFTER", 2))


def unavailable_response(request: HttpRequest) -> HttpResponse:
    seconds = retry_after_seconds()
    message = f"The service is overloaded; please try again in {seconds} seconds."
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": message, "code": "database_unavailable"}, status=503)
    else:
        response = HttpResponse(
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            "<title>Service unavailable</title></head><body>"
            f"<h1>Service unavailable</h1><p>{message}</p></body></html>",
            status=503,
            content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = str(seconds)
    return response


def _mark_request(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    if request is not None and database_unavailable(sys.exc_info()[1]):
        setattr(request, _MARK, True)


got_request_exception.connect(_mark_request, dispatch_uid="sas-database-unavailable")


class DatabaseUnavailableMiddleware:
    """First in MIDDLEWARE (after the policy header's), so that it sees every other layer's
    response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(request, _MARK, False) and response.status_code == 500:
            return unavailable_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not database_unavailable(exception):
            return None
        logger.warning(
            "%s %s: database unavailable, answered 503: %s", request.method, request.path, exception
        )
        return unavailable_response(request)


# --- Content-Security-Policy (issue 26) ---
# Django 5.2 has none built in. Scripts, styles, images, fonts and fetches from this site only;
# no inline script or style (the templates link static files; the one exception below), no
# plugins, no <base> elsewhere, forms posting here only, no framing. JSON for the scripts is in
# <script type="application/json"> elements (json_script), which the policy does not run.
CSP_DIRECTIVES: dict[str, list[str]] = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
# templates/500.html stands alone (it may be shown while the static files are the problem), so
# its <style> element is inline; the policy allows exactly that element, by its hash.
_ERROR_PAGE = Path(__file__).resolve().parent.parent / "templates" / "500.html"
_STYLE_ELEMENT = re.compile(r"<style>(.*?)</style>", re.S)
_TEMPLATE_COMMENT = re.compile(r"{% comment %}.*?{% endcomment %}", re.S)


def inline_style_hashes() -> list[str]:
    """The hash sources of templates/500.html's <style> elements (CSP's 'sha256-...' form), as
    rendered: the template's comments left out."""
    page = _TEMPLATE_COMMENT.sub("", _ERROR_PAGE.read_text())
    return [
        f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
        for body in _STYLE_ELEMENT.findall(page)
    ]


def content_security_policy() -> str:
    directives = {**CSP_DIRECTIVES, "style-src": [*CSP_DIRECTIVES["style-src"], *inline_style_hashes()]}
    return "; ".join(f"{name} {' '.join(sources)}" for name, sources in directives.items())


class ContentSecurityPolicyMiddleware:
    """Every response carries the policy, except Django's own error pages with DEBUG on (its
    technical 404 and 500 pages are inline styles and scripts; with DEBUG off the site's 404 and
    500 templates are used, which the policy covers). First in MIDDLEWARE: the database's 503
    page gets it too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.policy = content_security_policy()

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not (settings.DEBUG and response.status_code in (404, 500)):
            response.headers.setdefault("Content-Security-Policy", self.policy)
        return response

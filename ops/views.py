"""Endpoints for load balancers and Prometheus: /healthz, /readyz, /metrics.

Thin: the checks are in ops/probes.py, the figures in ops/metrics.py. None of them uses a
session or renders a page; /metrics asks for its own credentials (a bearer token or basic auth
from settings.SAS_MONITORING), never a login.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from .metrics import EngineCollector
from .probes import broker_check, database_check, migrations_check


@never_cache
@require_GET
def healthz(request: HttpRequest) -> HttpResponse:
    """The process is alive and serving: no database, no broker (a liveness probe must not fail
    a web process because PostgreSQL is down - restarting it would not help)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> HttpResponse:
    """Ready for traffic: the database answers, its migrations are applied, the broker answers.
    503 with the reasons otherwise."""
    database = database_check()
    problems = [p for p in (database, "" if database else migrations_check(), broker_check()) if p]
    if problems:
        return JsonResponse({"status": "unavailable", "reasons": problems}, status=503)
    return JsonResponse({"status": "ok"})


def _authorized(request: HttpRequest) -> bool:
    """A bearer token or basic auth equal to the configured one (constant-time comparisons).
    Nothing configured: nobody."""
    conf = settings.SAS_MONITORING
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer" and conf["METRICS_TOKEN"]:
        return hmac.compare_digest(value.strip().encode(), str(conf["METRICS_TOKEN"]).encode())
    if scheme == "basic" and conf["METRICS_BASIC_AUTH"]:
        try:
            given = base64.b64decode(value.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, str(conf["METRICS_BASIC_AUTH"]).encode())
    return False


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The engine's figures in the Prometheus text format (ops/metrics.py)."""
    if not _authorized(request):
        response = HttpResponse("credentials required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Basic realm="metrics"'
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(EngineCollector())
    # The classic text format (0.0.4) that every Prometheus 2.x and 3.x scrapes without a
    # fallback setting; prometheus_client's "latest" (1.0.0) is refused by Prometheus 3 unless
    # its scrape config names a fallback protocol. Our names need no UTF-8 escaping.
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_PLAIN_0_0_4)

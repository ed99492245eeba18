"""Flower, read-only for operators, with its /metrics behind the login (issue 26).

    python -m sasproject.flower_readonly -A sasproject flower --basic_auth=user:password [options]

runs the `celery flower` command as usual (every Flower option works), after changing two things
in Flower 2.2's routes (flower/urls.py), before Flower builds its application from them:

- every route that acts on the cluster answers 403 to anyone, logged in or not: sending or
  applying a task (`/api/task/async-apply/<name>`, `apply`, `send-task` - a forged agent request
  or a periodic task's work from the one shared login), revoking, aborting, time limits and
  rate limits of tasks, and a worker's shutdown, pool restart/grow/shrink/autoscale and queue
  consumers. The dashboard's buttons for them get the same 403. Flower has no read-only mode of
  its own; an operator who must act on a worker does it with `celery control` where the broker's
  credentials are;
- `/metrics` asks for the login as every page does (Flower answers it to anyone: worker host
  names, task names), and is refused outright when Flower runs with no login at all.

`/healthcheck` stays open (compose's health check). Everything else Flower shows - workers,
tasks, their arguments and results, the broker's queues - still needs the login and is read
only. docs/operating/operators.md, "Flower", and docs/decisions.md (record 16) say why.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import tornado.web

logger = logging.getLogger("sasproject.flower_readonly")

# Flower 2.2's routes that change something (flower/urls.py), by their pattern.
WRITE_ROUTES: frozenset[str] = frozenset(
    {
        r"/api/worker/shutdown/(.+)",
        r"/api/worker/pool/restart/(.+)",
        r"/api/worker/pool/grow/(.+)",
        r"/api/worker/pool/shrink/(.+)",
        r"/api/worker/pool/autoscale/(.+)",
        r"/api/worker/queue/add-consumer/(.+)",
        r"/api/worker/queue/cancel-consumer/(.+)",
        r"/api/task/apply/(.+)",
        r"/api/task/async-apply/(.+)",
        r"/api/task/send-task/(.+)",
        r"/api/task/abort/(.+)",
        r"/api/task/timeout/(.+)",
        r"/api/task/rate-limit/(.+)",
        r"/api/task/revoke/(.+)",
    }
)
METRICS_ROUTE = r"/metrics"


class ReadOnly(tornado.web.RequestHandler):
    """Every method of a route that would act on the cluster: 403, nothing done."""

    def check_xsrf_cookie(self) -> None:
        """Refused whatever the token: no XSRF check first (its 403 would not be logged)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        logger.warning("Flower is read-only: %s %s refused", self.request.method, self.request.path)
        self.set_status(403)
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.finish("Flower is read-only here (sasproject.flower_readonly): use `celery control`.\n")

    get = post = put = patch = delete = _refuse


def _metrics_behind_login(metrics: type[Any]) -> type[Any]:
    class Metrics(metrics):
        """Flower's /metrics, answered only to a logged-in client (basic auth or OAuth)."""

        async def get(self) -> None:
            options = self.application.options
            if not (options.basic_auth or options.auth):
                raise tornado.web.HTTPError(401)  # no login configured: nobody may read them
            if not self.current_user:  # basic auth: raises 401 itself on a wrong or no header
                raise tornado.web.HTTPError(401)
            await super().get()

    return Metrics


def flower_readonly_routes_install() -> None:
    """Rewrite Flower's route list in place (Flower's application reads it when it is built,
    after this). Idempotent. Raises RuntimeError if a route it must change is not there: a
    Flower upgrade that moved one must not start writable."""
    from flower import urls
    from flower.views import monitor

    found: set[str] = set()
    for index, handler in enumerate(urls.handlers):
        pattern = handler.regex.pattern.rstrip("$") if hasattr(handler, "regex") else handler[0]
        if pattern in WRITE_ROUTES:
            urls.handlers[index] = (pattern, ReadOnly)
            found.add(pattern)
        elif pattern == METRICS_ROUTE:
            if not getattr(handler[1], "sas_behind_login", False):
                metrics = _metrics_behind_login(monitor.Metrics)
                metrics.sas_behind_login = True
                urls.handlers[index] = (pattern, metrics)
            found.add(pattern)
    missing = (WRITE_ROUTES | {METRICS_ROUTE}) - found
    if missing:
        raise RuntimeError(f"Flower's routes changed; not starting it writable: {sorted(missing)}")


def main() -> None:
    from celery.bin.celery import celery
    from celery.bin.celery import main as celery_main
    from flower.command import flower

    flower_readonly_routes_install()
    celery.add_command(flower)
    sys.exit(celery_main())


if __name__ == "__main__":
    main()

"""gunicorn's settings for the web process (`make run`'s Procfile and docker/compose.yml).

A fixed number of processes and threads, so the web holds a known number of PostgreSQL
connections whatever the request concurrency: WEB_WORKERS processes, each with WEB_THREADS
threads serving requests and a connection pool of DATABASE_POOL_MAX_SIZE (settings/base.py) that
those threads share. Requests beyond the threads wait in the listen backlog; a request that
waits longer than DATABASE_POOL_TIMEOUT for a connection answers 503 with Retry-After
(sasproject/middleware.py). The figures behind the defaults: docs/design.md, "Database
connections". https://docs.gunicorn.org/en/stable/settings.html
"""

from __future__ import annotations

import os

# The web's database connections: a pool per process, shared by its threads (settings/base.py). The
# environment may override these; the defaults are what `make run` and docker/compose.yml use.
# 4 per process held 2 x 8 threads at the throughput of one connection per thread (16) and of
# per-request connections (bench/web_load.py, docs/design.md).
os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "4")
os.environ.setdefault("DATABASE_POOL_MIN_SIZE", "1")
os.environ.setdefault("DATABASE_APPLICATION_NAME", "sas-web")

bind = [f"{os.environ.get('WEB_HOST', '127.0.0.1')}:{os.environ.get('WEB_PORT', '8000')}"]
workers = int(os.environ.get("WEB_WORKERS", "2"))
# gthread: a thread per request in flight, up to `threads` per process.
# https://docs.gunicorn.org/en/stable/design.html#choosing-a-worker-type
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "8"))
# A request slower than this is killed with its worker (the default, said out loud).
timeout = 30
graceful_timeout = 10
# Cheap limits on what a client may send (issue 26). They do not stop a slow client: the gthread
# worker gives a connection's thread 5 s for its first bytes, then reads the rest of its headers
# with no deadline, so a client that sends a header line every few seconds holds a thread for as
# long as it likes. In front of the web there must be a buffering proxy with header and body
# deadlines (docker/nginx/nginx.conf; docs/deploying/deploy.md, "The front door").
# An idle kept-alive connection (a client talking to gunicorn directly: `make run`) is closed
# after 2 s (gunicorn's default, said out loud); the proxy opens one connection per request.
keepalive = 2
# The request line up to 8 kB and each header line up to 8 kB, as the proxy's
# large_client_header_buffers, so what nginx passes gunicorn takes; at most 50 header lines (a
# browser sends about 15, the proxy adds 4). Beyond these gunicorn refuses the request (414, 431).
limit_request_line = 8190
limit_request_field_size = 8190
limit_request_fields = 50
# One line per request on stdout, like runserver.
accesslog = "-"
errorlog = "-"

# LOG_FORMAT=json (docker/production.env.example): gunicorn's own lines (its start-up, errors,
# the access log) as JSON objects too, like Django's (sasproject/logs.py), so every line of the
# web's output parses. Merged into gunicorn's defaults.
# https://docs.gunicorn.org/en/stable/settings.html#logconfig-dict
if os.environ.get("LOG_FORMAT", "").strip().lower() == "json":
    # gunicorn updates its default dict with this one key by key (a shallow merge): the root's
    # handler "console" must be defined here too.
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": "sasproject.logs.JsonFormatter"}},
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"}
        },
        "root": {"level": "INFO", "handlers": ["console"]},
        "loggers": {
            "gunicorn.error": {
                "handlers": ["console"],
                "level": "INFO",
                "propagate": False,
                "qualname": "gunicorn.error",
            },
            "gunicorn.access": {
                "handlers": ["console"],
                "level": "INFO",
                "propagate": False,
                "qualname": "gunicorn.access",
            },
        },
    }

"""Django settings for sasproject (`DJANGO_SETTINGS_MODULE=sasproject.settings`).

Everything that differs between a laptop, CI and production comes from the environment, with
defaults that run locally (cookiecutter-django style). `DATABASE_URL` and `REDIS_URL` choose the
PostgreSQL and Redis to use; `make run` / `make test` fill them in (starting embedded servers when
the machine has none, see `devservices/`).

One module per concern (issue 27). A module that extends the SAS dict (engine.py)
imports it, so the order of the star imports below does not matter:
- `env`: reading the environment;
- `base`: the Django project (apps, middleware, database, templates, logs);
- `production`: the production profile (DEBUG, the secret key, hosts, HTTPS, cookies, static files);
- `celery_conf`: Celery, the broker and beat;
- `engine`, `domains`: the SAS dict - the engine's actors, then the order, catalogue and export
  workflows' step policies;
- `egress`: where outbound calls may go;
- `web`: the pages and the JSON API;
- `monitoring`, `alerting`: the operations wing;
- `storage`: history partitions, retention and the archive (issue 29).
The test profile (short windows for the live tests and the soak) is not a settings module: it is
environment variables that the test session and the soak both take from `sastools/profile.py`,
so worker subprocesses started with this module get it too.
"""

from __future__ import annotations

from sasproject.settings.alerting import *  # noqa: F403
from sasproject.settings.base import *  # noqa: F403
from sasproject.settings.celery_conf import *  # noqa: F403
from sasproject.settings.domains import *  # noqa: F403
from sasproject.settings.egress import *  # noqa: F403
from sasproject.settings.engine import *  # noqa: F403
from sasproject.settings.monitoring import *  # noqa: F403
from sasproject.settings.production import *  # noqa: F403
from sasproject.settings.storage import *  # noqa: F403
from sasproject.settings.web import *  # noqa: F403

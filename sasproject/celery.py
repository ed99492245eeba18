"""The Celery application. All settings live in Django settings under the CELERY_ namespace."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")

app = Celery("sasproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _close_old_db_connections(**kwargs: Any) -> None:
    """Treat each task like a request: drop a connection that is broken (CONN_HEALTH_CHECKS
    re-checks it before reuse, so a PostgreSQL restart costs one reconnect, not failed tasks) or
    older than CONN_MAX_AGE; keep a healthy one. See CELERY_DB_REUSE_MAX in settings."""
    from django.db import close_old_connections

    close_old_connections()

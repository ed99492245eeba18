"""The Celery application. All settings live in Django settings under the CELERY_ namespace."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")

app = Celery("sasproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

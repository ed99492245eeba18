"""The project's settings plus django-tasks-db (the framework's reference database backend) as
the task backend "db", for bench/djtasks.py only: the product never installs it."""

from __future__ import annotations

from sasproject.settings import *  # noqa: F403
from sasproject.settings import INSTALLED_APPS, TASKS

INSTALLED_APPS = [*INSTALLED_APPS, "django_tasks_db"]
TASKS = {**TASKS, "db": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default"]}}

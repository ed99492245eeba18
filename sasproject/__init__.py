from __future__ import annotations

# Load the Celery app whenever Django starts so that @shared_task binds to it
# and `transaction.on_commit(task.delay)` works from web processes.
from .celery import app as celery_app

__all__ = ("celery_app",)

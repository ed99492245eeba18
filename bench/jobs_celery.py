"""The project's Celery app plus bench/jobs_tasks.py, for bench/jobs.py's worker processes only:

    celery -A bench.jobs_celery worker ...

Celery imports `bench.jobs_tasks` at worker start (after Django is set up), so the bench's
workflow and no-op agent exist in the bench's workers and nowhere else.
"""

from __future__ import annotations

from sasproject.celery import app

app.conf.imports = (*tuple(app.conf.imports or ()), "bench.jobs_tasks")

__all__ = ["app"]

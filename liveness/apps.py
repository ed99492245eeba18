from __future__ import annotations

from django.apps import AppConfig


class LivenessConfig(AppConfig):
    """Who is alive (issue 27): workers' heartbeats per queue, when each periodic task last
    succeeded, the queues' depths on either broker, and the engine's counters - each fact kept
    and read in one place, in Redis or the broker. A low room: it imports no app (pyproject.toml's
    `liveness-low` contract); the engine, metrics, the health page and alerting import it."""

    name = "liveness"
    verbose_name = "Liveness"

    def ready(self) -> None:
        from celery.signals import task_postrun

        from .last_run import last_run_recorded

        task_postrun.connect(last_run_recorded, dispatch_uid="liveness.last_run", weak=False)

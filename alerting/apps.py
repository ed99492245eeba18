from __future__ import annotations

from django.apps import AppConfig


class AlertingConfig(AppConfig):
    """Alert rules' evaluation and delivery (issue 21): reads the engine (scheduler, supervisor's
    alert rows, agents' breakers) and delivers through webhooks' agent; the rule and alert rows
    are the supervisor's (supervisor/models.py), so the engine's own signals raise into them."""

    name = "alerting"
    verbose_name = "Alerting"

    def ready(self) -> None:
        from celery.signals import worker_ready, worker_shutdown

        from . import checks, tasks, watchdog, webhook  # noqa: F401  (registers the workflow, tasks, checks)

        worker_ready.connect(watchdog.watchdog_start, dispatch_uid="alerting.watchdog_start", weak=False)
        worker_shutdown.connect(watchdog.watchdog_stop, dispatch_uid="alerting.watchdog_stop", weak=False)

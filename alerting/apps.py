from __future__ import annotations

from django.apps import AppConfig


class AlertingConfig(AppConfig):
    """The alerting room (issues 21, 27): the rule, alert and affected-run models, their
    transitions (transitions.py, sql/alerts.sql), the shipped rules, the evaluator and its beat
    row, delivery, the admin, and the receivers of the engine's signals (a step in Error, a
    compensation that keeps failing), which raise alerts at once - the engine never imports
    this app."""

    name = "alerting"
    verbose_name = "Alerting"

    def ready(self) -> None:
        from celery.signals import worker_ready, worker_shutdown

        from scheduler.signals import step_errored, step_struggling

        from . import checks, receivers, tasks, watchdog, webhook  # noqa: F401  (registers the workflow, tasks, checks)

        step_errored.connect(receivers.on_step_errored, dispatch_uid="alerting.on_step_errored")
        step_struggling.connect(receivers.on_step_struggling, dispatch_uid="alerting.on_step_struggling")
        worker_ready.connect(watchdog.watchdog_start, dispatch_uid="alerting.watchdog_start", weak=False)
        worker_shutdown.connect(watchdog.watchdog_stop, dispatch_uid="alerting.watchdog_stop", weak=False)

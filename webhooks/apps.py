from __future__ import annotations

from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Webhooks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Register the delivery workflow and listen to the engine's run events.
        from scheduler.signals import run_event

        # `tasks` too: its `@schedulable` task registers a workflow every process must know.
        from . import receivers, tasks, workflows  # noqa: F401

        run_event.connect(receivers.on_run_event, dispatch_uid="webhooks.on_run_event")

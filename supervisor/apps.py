from __future__ import annotations

from django.apps import AppConfig


class SupervisorConfig(AppConfig):
    name = "supervisor"
    verbose_name = "Supervisor"

    def ready(self) -> None:
        from scheduler.signals import step_errored

        from . import receivers

        step_errored.connect(receivers.on_step_errored, dispatch_uid="supervisor.on_step_errored")

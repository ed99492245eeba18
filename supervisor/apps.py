from __future__ import annotations

from django.apps import AppConfig


class SupervisorConfig(AppConfig):
    name = "supervisor"
    verbose_name = "Supervisor"

    def ready(self) -> None:
        from scheduler.signals import step_errored, step_struggling

        from . import receivers

        step_errored.connect(receivers.on_step_errored, dispatch_uid="supervisor.on_step_errored")
        step_struggling.connect(receivers.on_step_struggling, dispatch_uid="supervisor.on_step_struggling")

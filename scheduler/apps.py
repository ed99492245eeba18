from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig
from django.conf import settings


class SchedulerConfig(AppConfig):
    name = "scheduler"
    verbose_name = "Scheduler (state store)"

    def ready(self) -> None:
        # Modules that register workflows beyond the apps' own (each app registers its
        # workflows in its ready()); by name, as INSTALLED_APPS. The tests give their worker
        # processes the engine's test workflow this way, so a job of it can fire there.
        for module in settings.SAS.get("WORKFLOW_MODULES", ()):
            import_module(module)

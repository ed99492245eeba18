from __future__ import annotations

from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "exports"
    verbose_name = "Exports (heartbeat demo)"

    def ready(self) -> None:
        # Register the export workflow with the engine.
        from . import workflows  # noqa: F401

from __future__ import annotations

from django.apps import AppConfig


class CatalogueConfig(AppConfig):
    name = "catalogue"
    verbose_name = "Catalogue (paginated reprice demo)"

    def ready(self) -> None:
        # Register the reprice workflow with the engine.
        from . import workflows  # noqa: F401

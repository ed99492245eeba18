from __future__ import annotations

from django.apps import AppConfig


class OpsConfig(AppConfig):
    """Operator tools that read every app: the engine-health page and the run admin's view of
    alerts and orders (later metrics and alert rules). Above every other app; none imports it."""

    name = "ops"
    verbose_name = "Operator tools"

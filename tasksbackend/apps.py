from __future__ import annotations

from importlib import import_module

from django.apps import AppConfig
from django.conf import settings
from django.utils.module_loading import import_string


class TasksBackendConfig(AppConfig):
    name = "tasksbackend"
    verbose_name = "Django tasks on the engine"

    def ready(self) -> None:
        """Make every EngineBackend of TASKS now, so that every process (web, workers) has its
        agent operations registered before a message arrives, then import the task modules its
        OPTIONS "MODULES" lists (`<app>/tasks.py` modules are imported by Celery's
        autodiscovery in the workers, and by the code that enqueues elsewhere)."""
        from django_tasks import task_backends

        from .backend import EngineBackend

        for alias, conf in getattr(settings, "TASKS", {}).items():
            if issubclass(import_string(conf["BACKEND"]), EngineBackend):
                task_backends[alias]
                for module in conf.get("OPTIONS", {}).get("MODULES", []):
                    import_module(module)

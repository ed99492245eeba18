from __future__ import annotations

from django.apps import AppConfig


class SupervisorConfig(AppConfig):
    """The sweep of steps past their deadlines, and its dry run (the alerts it causes are
    raised by alerting's receivers of the engine's signals, alerting/receivers.py)."""

    name = "supervisor"
    verbose_name = "Supervisor"

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks


class AgentsConfig(AppConfig):
    name = "agents"
    verbose_name = "Agents"

    def ready(self) -> None:
        # The job targets every process must know: the `http.call` workflow and the agent
        # operation that runs `@schedulable` tasks (their `task:<name>` workflows register
        # where each task is defined).
        from . import http_call, schedulable  # noqa: F401

        checks.register(_check_egress_policies)


def _check_egress_policies(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    from .egress import egress_config_errors

    return [checks.Error(message, id="agents.E001") for message in egress_config_errors()]

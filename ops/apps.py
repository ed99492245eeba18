from __future__ import annotations

from django.apps import AppConfig


class OpsConfig(AppConfig):
    """The operator's room (issue 27): the audited actions on runs and breakers, their audit
    (`OperatorAction`) and permissions (`ops.*`), which actions fit a run (one table, one
    selector: run_actions.py), the roles, the engine-health page, /metrics and the run admin's
    view of alerts and orders. Above every other app; none imports it."""

    name = "ops"
    verbose_name = "Operator tools"

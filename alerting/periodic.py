"""Alerting's django-celery-beat row: the alert rules' evaluator (issue 21; alerting/services.py),
every SAS_ALERTS_INTERVAL. The control worker's watchdog also runs it when beat's ticks stop (the
dead man's switch; docs/decisions.md, record 10). Created by alerting's own migration through the engine's
`periodic_tasks_ensure` (supervisor/periodic.py), which gathers it for `setup_periodic_tasks`.
"""

from __future__ import annotations

EVALUATOR_PERIODIC_TASK = ("sas: alert rules", "alerting.evaluate", "supervisor", "ALERTS_INTERVAL")

PERIODIC_TASKS = (EVALUATOR_PERIODIC_TASK,)

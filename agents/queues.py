"""The agent queues the registered workflows need, derived from their declarations (issue 31):
each step's operation (and its compensation's) routed as Celery routes it (CELERY_TASK_ROUTES,
agents/routing.py). `manage.py worker_queues` prints them, and the Procfile's and compose's
`agents-apps` worker consumes those that no other worker line names - so a new workflow app's
queue is served without a Procfile line, a compose service or a route written by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

from celery import current_app

from scheduler.workflows import get_workflow, registered_workflows

# The agents-apps worker's own queue: it always consumes it, so it is a worker (answering pings,
# a healthcheck) before any workflow app exists. Operations named `agents.apps.<op>` share it.
APPS_QUEUE = "agent.apps"
_QUEUES_OPTION = re.compile(r"(?:^|\s)-Q\s+([\w.,-]+)")


def operation_queue(operation: str) -> str:
    """The queue Celery sends `operation` to (its route, or the default queue)."""
    route = current_app.amqp.router.route({}, operation, args=(), kwargs={})
    queue = route.get("queue")
    return str(getattr(queue, "name", queue) or current_app.conf.task_default_queue)


def workflow_queues() -> dict[str, list[str]]:
    """Queue -> the operations of registered workflows routed to it (sorted)."""
    found: dict[str, set[str]] = {}
    for name in registered_workflows():
        for step in get_workflow(name).steps:
            for each in (step, step.compensation):
                if each is not None:
                    found.setdefault(operation_queue(each.operation), set()).add(each.operation)
    return {queue: sorted(found[queue]) for queue in sorted(found)}


def procfile_queues(procfile: Path) -> set[str]:
    """The queues named literally by a `-Q` of a Procfile's (or compose file's) worker lines."""
    served: set[str] = set()
    for line in procfile.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in _QUEUES_OPTION.finditer(line):
            served.update(q for q in match[1].split(",") if q)
    return served


def unserved_queues(procfile: Path) -> list[str]:
    """The apps worker's queues: its own, then every agent queue of a registered workflow that
    no worker line of `procfile` names."""
    served = procfile_queues(procfile)
    return [APPS_QUEUE] + [q for q in workflow_queues() if q not in served and q != APPS_QUEUE]

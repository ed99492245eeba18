"""Workflow apps found in the tree (issue 31, item 2): a developer's app is installed by being
there, not by an edit of the settings' text.

A workflow app is a top-level package of the repository with an `apps.py` (its AppConfig, whose
`ready()` imports its workflows and operations) and a `workflows.py` (its `Workflow`
declarations) - the shape `manage.py startworkflow NAME` writes. Settings append every one that
INSTALLED_APPS does not already list (orders, catalogue... are listed, in their order), and
declare its agent queue `agent.<app>`: a workflow app's operations are named
`agents.<app>.<operation>` and route there (agents/routing.py). tests/ops/test_queues.py fails
when a registered operation routes to a queue that is not declared, so the convention is checked.

Read before Django is set up (settings import it): files only, no import of the apps.
"""

from __future__ import annotations

from pathlib import Path

# The threads of the workers that serve the workflow apps' queues (the Procfile's and compose's
# `agents-apps`, `-c 8`): each such queue's bulkhead slots (SAS["BULKHEAD_SLOTS"]).
WORKFLOW_APP_SLOTS = 8

# Folders that are never apps, whatever they hold.
NOT_APPS = frozenset({"tests", "bench", "soak", "docs", "docker", "templates"})


def workflow_apps_found(*, root: Path, listed: list[str]) -> list[str]:
    """Top-level packages under `root` with an apps.py and a workflows.py, not in `listed`,
    sorted by name (a stable INSTALLED_APPS order)."""
    found = []
    for package in sorted(root.iterdir()):
        name = package.name
        if name.startswith((".", "_")) or name in NOT_APPS or name in listed or not name.isidentifier():
            continue
        if all((package / part).is_file() for part in ("__init__.py", "apps.py", "workflows.py")):
            found.append(name)
    return found


def workflow_app_queue(app: str) -> str:
    """The agent queue of a workflow app's operations (`agents.<app>.<op>` -> `agent.<app>`)."""
    return f"agent.{app}"

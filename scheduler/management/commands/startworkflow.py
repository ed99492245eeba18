"""`manage.py startworkflow NAME`: a new workflow app (scheduler/scaffold/)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduler.scaffold import ScaffoldError, workflow_app_create


class Command(BaseCommand):
    help = (
        "Create the workflow app NAME: NAME/ (apps.py, workflows.py with a one-step workflow, "
        "tasks.py with its agent operation agents.NAME.process) and tests/NAME/, and add NAME to "
        "the import-linter contracts in pyproject.toml. Settings install it because it is there."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the app's name: lower-case letters, digits and _")
        parser.add_argument(
            "--root", default=str(settings.BASE_DIR), help="the repository (default: this one)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        name, root = options["name"], Path(options["root"])
        labels = {config.label for config in apps.get_app_configs()}
        try:
            written = workflow_app_create(name=name, root=root, labels=labels)
        except ScaffoldError as exc:
            raise CommandError(str(exc)) from None
        for path in written:
            self.stdout.write(f"wrote {path.relative_to(root)}")
        self._tidy([str(p) for p in written if p.suffix == ".py"], root)
        self.stdout.write(
            f"\nNext: .venv/bin/pytest tests/{name} -q  (its tests)\n"
            f"      make run  (the agents-apps worker serves agent.{name}; restart it when it runs)\n"
            f"      docs/developing/workflows.md  (more steps, compensations, deadlines)"
        )

    def _tidy(self, paths: list[str], root: Path) -> None:
        """The project's formatter and import order on the new files (a long NAME moves lines)."""
        ruff = Path(sys.executable).parent / "ruff"
        if not ruff.exists():
            self.stderr.write("ruff not found beside Python: run `make format` before `make lint`")
            return
        for command in (["format", "--quiet"], ["check", "--fix", "--quiet"]):
            subprocess.run([str(ruff), *command, *paths], cwd=root, check=False)

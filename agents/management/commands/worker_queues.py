"""`manage.py worker_queues`: the queues the registered workflows' operations route to, and
which worker line of the Procfile serves each; `--unserved`: the agents-apps worker's `-Q`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.queues import procfile_queues, unserved_queues, workflow_queues


class Command(BaseCommand):
    help = (
        "Print the queues the registered workflows' operations route to. --unserved: the "
        "comma-separated -Q of the Procfile's agents-apps worker (its own queue, then every "
        "workflow queue no other worker line names)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--unserved", action="store_true", help="print the agents-apps worker's -Q")
        parser.add_argument(
            "--procfile",
            default=str(Path(settings.BASE_DIR) / "Procfile"),
            help="the worker lines whose -Q count as served (default: the repository's Procfile)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        procfile = Path(options["procfile"])
        if not procfile.is_file():
            raise CommandError(f"no such file: {procfile}")
        if options["unserved"]:
            self.stdout.write(",".join(unserved_queues(procfile)))
            return
        served = procfile_queues(procfile)
        for queue, operations in workflow_queues().items():
            by = "a Procfile line" if queue in served else "agents-apps"
            self.stdout.write(f"{queue}\t{by}\t{', '.join(operations)}")

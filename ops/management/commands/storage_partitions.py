"""`manage.py storage_partitions`: make the history partitions ahead of time now (what the
"sas: storage maintenance" beat row does each hour), optionally with the retention's drops and
the runs' purge (--retention), and list each kept table's partitions (--list)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ops.storage.retention import partitions_make_ahead, storage_maintain
from ops.storage.tables import KEPT_TABLES
from scheduler.partitions import partitions_list


class Command(BaseCommand):
    help = "Make history partitions ahead (SAS_PARTITIONS_AHEAD_DAYS); --retention also drops and purges."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--retention",
            action="store_true",
            help="also archive and drop partitions past retention, purge old runs",
        )
        parser.add_argument(
            "--list", action="store_true", help="list each kept table's partitions afterwards"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["retention"]:
            done = storage_maintain()
            made = done.made
            for path, rows in done.archived.items():
                self.stdout.write(f"archived {rows} rows to {path}")
            self.stdout.write(
                f"dropped: {', '.join(done.dropped) or 'none'}; runs purged: {done.runs_purged}"
            )
        else:
            made = partitions_make_ahead()
        self.stdout.write(f"partitions made: {', '.join(made) or 'none (all in place)'}")
        if options["list"]:
            for kept in KEPT_TABLES:
                names = [p.name for p in partitions_list(kept.spec)]
                self.stdout.write(
                    f"{kept.spec.table} ({kept.setting}): {len(names)} partitions, {', '.join(names)}"
                )

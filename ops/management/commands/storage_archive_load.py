"""`manage.py storage_archive_load <file>`: load a dropped partition's archive back for an
investigation (ops/storage/archive.py). By default into a table of its own,
`archive_<partition>` (the parent's columns, no keys; drop it when done); `--into <table>`
names another, which may be the history table itself (its rows are then dropped again by the
next maintenance once their period is past retention)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from ops.storage.archive import archive_load
from ops.storage.tables import KEPT_TABLES


class Command(BaseCommand):
    help = "Load a partition's archive (<table>/<partition>.jsonl.gz) back into a table."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "file", type=Path, help="the archive: <SAS_ARCHIVE_DIR>/<table>/<partition>.jsonl.gz"
        )
        parser.add_argument(
            "--into", default="", help="the table to load into (default: archive_<partition>)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        table = path.parent.name
        specs = {kept.spec.table: kept.spec for kept in KEPT_TABLES}
        if table not in specs or not path.name.endswith(".jsonl.gz"):
            raise CommandError(
                f"{path} is no archive: expected <folder>/<{'|'.join(specs)}>/<partition>.jsonl.gz"
            )
        into = options["into"] or f"archive_{path.name.removesuffix('.jsonl.gz')}"
        try:
            rows = archive_load(path=path, spec=specs[table], into=into)
        except (FileNotFoundError, ValueError, DatabaseError) as error:
            raise CommandError(f"nothing loaded: {error}") from error
        self.stdout.write(f"loaded {rows} rows into {into}")

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from catalogue.services import catalogue_seed


class Command(BaseCommand):
    help = "Add demo products to the catalogue (100,000 by default) in one INSERT ... generate_series."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rows", type=int, default=100_000)
        parser.add_argument("--if-empty", action="store_true", help="Only when the catalogue is empty.")

    def handle(self, *args: Any, **options: Any) -> None:
        added = catalogue_seed(rows=options["rows"], if_empty=options["if_empty"])
        self.stdout.write(f"catalogue: {added} products added")

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from sasproject.login_throttle import login_unlock


class Command(BaseCommand):
    help = (
        "Lift the sign-in lockouts of USERNAME (from every address, or --address A only) and its "
        "slow-down, before their window ends. Addresses' own counts stay."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--address", default="", help="Only the lockout from this client address.")

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = login_unlock(username=options["username"], address=options["address"])
        self.stdout.write(f"{options['username']!r}: {deleted} throttle count(s) cleared")

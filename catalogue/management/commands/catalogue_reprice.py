from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from catalogue.services import reprice_submit
from scheduler.permissions import staff_may
from scheduler.workflows import WorkflowInputError


class Command(BaseCommand):
    help = (
        "Start a catalogue.reprice run (every product's price changed by --percent), owned by --user "
        "(staff holding the staff-work permission: repricing the shared catalogue is staff work)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--percent", required=True)
        parser.add_argument("--user", default="admin", help="The run's owner (username).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            owner = get_user_model().objects.get(username=options["user"])
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {options['user']!r}") from None
        try:
            run = reprice_submit(owner_id=owner.pk, by_staff=staff_may(owner), percent=options["percent"])
        except WorkflowInputError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"reprice run {run.pk} started; progress: /catalogue/reprices/{run.pk}/")

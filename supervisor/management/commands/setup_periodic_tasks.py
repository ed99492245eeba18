from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from supervisor.periodic import periodic_tasks_ensure, periodic_tasks_shipped


class Command(BaseCommand):
    help = "Create every shipped periodic task (django-celery-beat): the engine's and each app's."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--reset", action="store_true", help="restore intervals an operator changed")

    def handle(self, *args: Any, **options: Any) -> None:
        touched = periodic_tasks_ensure(
            interval_model=IntervalSchedule,
            task_model=PeriodicTask,
            intervals=settings.SAS,
            reset=options["reset"],
        )
        if touched:
            self.stdout.write(
                f"periodic tasks {'reset' if options['reset'] else 'created'}: {', '.join(touched)}"
            )
        else:  # already there: the migration creates them, so this is also a new database's case
            self.stdout.write(
                f"periodic tasks in place: {', '.join(name for name, *_ in periodic_tasks_shipped())}"
            )

from __future__ import annotations

from django.conf import settings
from django.db import migrations


def create_periodic_tasks(apps, schema_editor):
    from supervisor.periodic import PERIODIC_TASKS, periodic_tasks_ensure

    periodic_tasks_ensure(
        interval_model=apps.get_model("django_celery_beat", "IntervalSchedule"),
        task_model=apps.get_model("django_celery_beat", "PeriodicTask"),
        intervals=settings.SAS,
        rows=PERIODIC_TASKS,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("supervisor", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create_periodic_tasks, migrations.RunPython.noop)]

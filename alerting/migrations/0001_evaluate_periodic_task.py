"""The alert evaluator's django-celery-beat row ("sas: alert rules", every SAS_ALERTS_INTERVAL)."""

from django.conf import settings
from django.db import migrations


def create(apps, schema_editor):
    from alerting.periodic import PERIODIC_TASKS
    from supervisor.periodic import periodic_tasks_ensure

    periodic_tasks_ensure(
        interval_model=apps.get_model("django_celery_beat", "IntervalSchedule"),
        task_model=apps.get_model("django_celery_beat", "PeriodicTask"),
        intervals=settings.SAS,
        rows=PERIODIC_TASKS,
    )


class Migration(migrations.Migration):
    dependencies = [
        ("supervisor", "0006_alert_rules"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(create, migrations.RunPython.noop)]

from __future__ import annotations

from django.db import migrations
from django.utils import timezone


def to_jobs_queue(apps, schema_editor):
    # The dispatcher's runs go to its own worker (queue `jobs`, Procfile `dispatcher`). A row an
    # operator pointed at another queue is left as they set it.
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    changed = task_model.objects.filter(
        name="sas: jobs dispatcher", task="scheduler.jobs_dispatch", queue="scheduler"
    ).update(queue="jobs")
    if changed:
        # What PeriodicTasks.update_changed() does (not on a historical model): a running beat
        # re-reads its schedule.
        apps.get_model("django_celery_beat", "PeriodicTasks").objects.update_or_create(
            ident=1, defaults={"last_update": timezone.now()}
        )


def to_scheduler_queue(apps, schema_editor):
    task_model = apps.get_model("django_celery_beat", "PeriodicTask")
    task_model.objects.filter(name="sas: jobs dispatcher", queue="jobs").update(queue="scheduler")


class Migration(migrations.Migration):
    dependencies = [("supervisor", "0004_jobs_dispatcher_periodic_task")]

    operations = [migrations.RunPython(to_jobs_queue, to_scheduler_queue)]

"""A customer's shorter retention (RetentionPolicy), and the storage maintenance's beat row
("sas: storage maintenance", ops/periodic.py), issue 29."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def create_periodic(apps, schema_editor):
    from ops.periodic import PERIODIC_TASKS
    from supervisor.periodic import periodic_tasks_ensure

    periodic_tasks_ensure(
        interval_model=apps.get_model("django_celery_beat", "IntervalSchedule"),
        task_model=apps.get_model("django_celery_beat", "PeriodicTask"),
        intervals=settings.SAS,
        rows=PERIODIC_TASKS,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('ops', '0005_operator_action_partitioned'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [
        migrations.CreateModel(
            name='RetentionPolicy',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('runs_days', models.PositiveIntegerField(help_text='Days a finished run and its history are kept for this customer (at least 1).')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='retention_policy', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name_plural': 'retention policies',
                'constraints': [models.CheckConstraint(condition=models.Q(('runs_days__gte', 1)), name='retention_days_positive')],
            },
        ),
        migrations.RunPython(create_periodic, migrations.RunPython.noop),
    ]

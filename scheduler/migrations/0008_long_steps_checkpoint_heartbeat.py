# Long steps (issue 9): Checkpoint, the JobStatus-like HeartbeatStatus, Step.heartbeat_window.

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


def install(apps, schema_editor):
    """functions.sql gained sas_step_continue and sas_step_heartbeat, and claims carry the
    heartbeat window and close_by: install it again (after the new tables and column)."""
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0007_reinstall_functions'),
    ]

    operations = [
        migrations.CreateModel(
            name='Checkpoint',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('page_size', models.PositiveIntegerField(help_text='Rows per page (one short attempt each).')),
                ('page_start', models.BigIntegerField(default=0, help_text="Where the next page starts: the domain's cursor (last key done, or offset).")),
                ('pages_done', models.PositiveIntegerField(default=0)),
                ('rows_done', models.BigIntegerField(default=0)),
                ('total', models.BigIntegerField(blank=True, help_text='Rows in the whole input, once known.', null=True)),
                ('completed', models.BooleanField(default=False, help_text='The last page is done.')),
                ('started_at', models.DateTimeField(blank=True, help_text='When the first page began.', null=True)),
                ('updated_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now(), help_text='When the last page committed.')),
            ],
        ),
        migrations.CreateModel(
            name='HeartbeatStatus',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('status', models.CharField(choices=[('waiting', 'Waiting'), ('in_progress', 'In progress'), ('completed', 'Completed')], default='waiting', max_length=20)),
                ('lease', models.UUIDField(blank=True, null=True)),
                ('worker', models.CharField(blank=True, default='', max_length=200)),
                ('heartbeats', models.PositiveIntegerField(default=0, help_text='Heartbeats of the current attempt.')),
                ('last_heartbeat_at', models.DateTimeField(blank=True, null=True)),
                ('updated_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'verbose_name': 'job status (heartbeat)',
                'verbose_name_plural': 'job statuses (heartbeat)',
            },
        ),
        migrations.RemoveConstraint(
            model_name='taskexecutionhistory',
            name='history_status_valid',
        ),
        migrations.AddField(
            model_name='step',
            name='heartbeat_window',
            field=models.DurationField(blank=True, help_text='Each heartbeat extends complete-by to now + this window.', null=True),
        ),
        migrations.AlterField(
            model_name='taskexecutionhistory',
            name='status',
            field=models.CharField(choices=[('started', 'Started'), ('succeeded', 'Succeeded'), ('failed_transient', 'Failed (transient)'), ('failed_permanent', 'Failed (permanent)'), ('timed_out', 'Timed out'), ('cancelled', 'Cancelled'), ('ignored', 'Ignored (stale lease)'), ('retry_scheduled', 'Retry scheduled'), ('errored', 'Marked Error'), ('deferred', 'Deferred (did not reach the service)'), ('requeued', 'Not started in time (sent again)'), ('action', 'Action'), ('continued', 'Page done (next page sent)')], max_length=20),
        ),
        migrations.AddConstraint(
            model_name='taskexecutionhistory',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['started', 'succeeded', 'failed_transient', 'failed_permanent', 'timed_out', 'cancelled', 'ignored', 'retry_scheduled', 'errored', 'deferred', 'requeued', 'action', 'continued'])), name='history_status_valid'),
        ),
        migrations.AddField(
            model_name='checkpoint',
            name='run',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoints', to='scheduler.run'),
        ),
        migrations.AddField(
            model_name='checkpoint',
            name='step',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='checkpoint', to='scheduler.step'),
        ),
        migrations.AddField(
            model_name='heartbeatstatus',
            name='run',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='heartbeat_statuses', to='scheduler.run'),
        ),
        migrations.AddField(
            model_name='heartbeatstatus',
            name='step',
            field=models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='heartbeat_status', to='scheduler.step'),
        ),
        migrations.AddConstraint(
            model_name='checkpoint',
            constraint=models.CheckConstraint(condition=models.Q(('page_size__gt', 0)), name='checkpoint_page_size_positive'),
        ),
        migrations.AddConstraint(
            model_name='checkpoint',
            constraint=models.CheckConstraint(condition=models.Q(('rows_done__gte', 0)), name='checkpoint_rows_done_nonnegative'),
        ),
        migrations.AddConstraint(
            model_name='heartbeatstatus',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['waiting', 'in_progress', 'completed'])), name='heartbeatstatus_status_valid'),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

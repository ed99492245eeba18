"""The alert models move from supervisor to alerting (issue 27), without moving data.

State: the models are created here (and deleted from supervisor by supervisor 0010, which runs
after this one). Database: the three tables are renamed (`ALTER TABLE ... RENAME`, no copy; their
rows, indexes, constraints and the foreign keys to and from them stay), their id sequences with
them, and the content types move to app_label "alerting" - a permission points at its content
type by id, so the permissions and every group holding them (ops/roles.py's roles) follow.
"""

import datetime
import django.core.validators
import django.db.models.deletion
import sasproject.names
from django.conf import settings
from django.db import migrations, models


TABLES = ("alertrule", "alert", "alertrun")


def _rename(old: str, new: str) -> list[str]:
    statements = []
    for table in TABLES:
        statements.append(f"ALTER TABLE {old}_{table} RENAME TO {new}_{table}")
        statements.append(f"ALTER SEQUENCE IF EXISTS {old}_{table}_id_seq RENAME TO {new}_{table}_id_seq")
    return statements


def content_types_move(old: str, new: str):
    def move(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        Permission = apps.get_model("auth", "Permission")
        for model in TABLES:
            moving = ContentType.objects.filter(app_label=old, model=model).first()
            if moving is None:
                continue
            there = ContentType.objects.filter(app_label=new, model=model).first()
            if there is not None:
                # Made already (a fresh database's create_permissions): its permissions give way
                # to the moving ones, which the groups hold.
                Permission.objects.filter(content_type=there).delete()
                there.delete()
            moving.app_label = new
            moving.save(update_fields=["app_label"])
        ContentType.objects.clear_cache()

    return move


class Migration(migrations.Migration):

    dependencies = [
        ('alerting', '0001_evaluate_periodic_task'),
        ('supervisor', '0009_alertrule_name_and_recipients_checked'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('scheduler', '0030_bulkhead_slots'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='AlertRule',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(help_text="Shown in the alert and its notifications (the e-mail's subject): no control characters.", max_length=100, validators=[sasproject.names.control_characters_refuse])),
                        ('kind', models.CharField(choices=[('workflow_failure_rate', 'Failure rate of a workflow'), ('job_failure_rate', 'Failure rate of a job'), ('service_failure_rate', 'Failure rate of a remote service'), ('job_consecutive_failures', 'Consecutive failures of a job'), ('job_missed_runs', 'Missed runs of a job'), ('step_error', 'A step in Error'), ('run_needs_operator', 'A run needing an operator'), ('compensation_struggling', 'A compensation that keeps failing'), ('circuit_open', 'A circuit open longer than N seconds'), ('steps_overdue', 'Steps overdue'), ('queue_no_consumer', 'A queue with work and no consumer'), ('dispatch_lag', 'Dispatch lag over a threshold'), ('due_backlog', 'Due backlog over a threshold'), ('periodic_not_run', 'The supervisor or the dispatcher not run within N x its interval')], max_length=40)),
                        ('target', models.CharField(blank=True, default='', help_text="What the rule watches: a workflow name, a step name, a service (inventory), a queue (agent.payment), a periodic task row ('sas: supervisor sweep'). Empty: each one seen (one incident per subject). Job rules use the job field instead.", max_length=200)),
                        ('threshold', models.FloatField(default=0.5, help_text='Failure rates: a fraction 0..1. Consecutive failures, steps overdue, due backlog: a count. Circuit open, dispatch lag, missed runs: seconds. Periodic not run: N x interval.', validators=[django.core.validators.MinValueValidator(0)])),
                        ('min_runs', models.PositiveIntegerField(default=5, help_text='Failure rates: fire only with at least this many runs in the window.')),
                        ('window', models.DurationField(default=datetime.timedelta(seconds=900), help_text='How far back failure rates and Error steps look.')),
                        ('for_duration', models.DurationField(default=datetime.timedelta(0), help_text='The condition must hold this long before the alert fires (pending until then).')),
                        ('cooldown', models.DurationField(default=datetime.timedelta(seconds=300), help_text='No second announcement of the same alert within this time: an incident that clears and comes back within it reopens the same alert instead of paging again.')),
                        ('severity', models.CharField(choices=[('info', 'Info'), ('warning', 'Warning'), ('critical', 'Critical')], default='warning', max_length=10)),
                        ('notify_email', models.BooleanField(default=True, help_text='Send an e-mail on firing and on resolution.')),
                        ('recipients', models.TextField(blank=True, default='', help_text="Comma-separated e-mail addresses. Empty: ADMINS (operator rules) or the owner's e-mail (customer rules, which always go to the owner only).", validators=[sasproject.names.recipients_validate])),
                        ('notify_webhook', models.BooleanField(default=False, help_text='POST a signed JSON notification.')),
                        ('webhook_url', models.CharField(blank=True, default='', help_text='Empty: SAS_ALERT_WEBHOOK_URL (operator rules). Checked by the egress policy.', max_length=500)),
                        ('enabled', models.BooleanField(default=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('job', models.ForeignKey(blank=True, help_text='Job rules: this job only (empty: every job; operators only).', null=True, on_delete=django.db.models.deletion.CASCADE, related_name='alert_rules', to='scheduler.job')),
                        ('owner', models.ForeignKey(blank=True, help_text="A customer's own rule (on their own job), notifying only them. Empty: an operator rule.", null=True, on_delete=django.db.models.deletion.CASCADE, related_name='alert_rules', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'ordering': ['name'],
                    },
                ),
                migrations.CreateModel(
                    name='Alert',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('workflow_failure_rate', 'Failure rate of a workflow'), ('job_failure_rate', 'Failure rate of a job'), ('service_failure_rate', 'Failure rate of a remote service'), ('job_consecutive_failures', 'Consecutive failures of a job'), ('job_missed_runs', 'Missed runs of a job'), ('step_error', 'A step in Error'), ('run_needs_operator', 'A run needing an operator'), ('compensation_struggling', 'A compensation that keeps failing'), ('circuit_open', 'A circuit open longer than N seconds'), ('steps_overdue', 'Steps overdue'), ('queue_no_consumer', 'A queue with work and no consumer'), ('dispatch_lag', 'Dispatch lag over a threshold'), ('due_backlog', 'Due backlog over a threshold'), ('periodic_not_run', 'The supervisor or the dispatcher not run within N x its interval')], max_length=40)),
                        ('severity', models.CharField(choices=[('info', 'Info'), ('warning', 'Warning'), ('critical', 'Critical')], default='warning', max_length=10)),
                        ('subject', models.CharField(blank=True, default='', help_text='What the incident is about.', max_length=200)),
                        ('message', models.TextField()),
                        ('state', models.CharField(choices=[('pending', 'Pending'), ('firing', 'Firing'), ('resolved', 'Resolved')], default='firing', max_length=10)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('fired_at', models.DateTimeField(blank=True, null=True)),
                        ('resolved_at', models.DateTimeField(blank=True, null=True)),
                        ('key', models.CharField(help_text='What makes two alerts the same incident.', max_length=300)),
                        ('count', models.PositiveIntegerField(default=1, help_text='Occurrences: runs affected, or times raised when no run is involved.')),
                        ('last_seen_at', models.DateTimeField(blank=True, null=True)),
                        ('announced_state', models.CharField(blank=True, default='', max_length=10)),
                        ('announced_at', models.DateTimeField(blank=True, null=True)),
                        ('acknowledged_at', models.DateTimeField(blank=True, null=True)),
                        ('acknowledged_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('run', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='alerts', to='scheduler.run')),
                        ('step', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='alerts', to='scheduler.step')),
                        ('rule', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='alerts', to='alerting.alertrule')),
                    ],
                    options={
                        'ordering': ['-created_at'],
                    },
                ),
                migrations.CreateModel(
                    name='AlertRun',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('linked_at', models.DateTimeField(auto_now_add=True)),
                        ('alert', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='links', to='alerting.alert')),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='alert_links', to='scheduler.run')),
                    ],
                ),
                migrations.AddIndex(
                    model_name='alertrule',
                    index=models.Index(condition=models.Q(('enabled', True)), fields=['kind'], name='alertrule_enabled_kind_idx'),
                ),
                migrations.AddConstraint(
                    model_name='alertrule',
                    constraint=models.UniqueConstraint(fields=('owner', 'name'), name='alertrule_owner_name_unique'),
                ),
                migrations.AddConstraint(
                    model_name='alertrule',
                    constraint=models.UniqueConstraint(condition=models.Q(('owner__isnull', True)), fields=('name',), name='alertrule_operator_name_unique'),
                ),
                migrations.AddConstraint(
                    model_name='alertrule',
                    constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['workflow_failure_rate', 'job_failure_rate', 'service_failure_rate', 'job_consecutive_failures', 'job_missed_runs', 'step_error', 'run_needs_operator', 'compensation_struggling', 'circuit_open', 'steps_overdue', 'queue_no_consumer', 'dispatch_lag', 'due_backlog', 'periodic_not_run'])), name='alertrule_kind_valid'),
                ),
                migrations.AddConstraint(
                    model_name='alertrule',
                    constraint=models.CheckConstraint(condition=models.Q(('threshold__gte', 0)), name='alertrule_threshold_nonnegative'),
                ),
                migrations.AddConstraint(
                    model_name='alertrule',
                    constraint=models.CheckConstraint(condition=models.Q(('owner__isnull', True), models.Q(('job__isnull', False), ('kind__in', ['job_failure_rate', 'job_consecutive_failures', 'job_missed_runs'])), _connector='OR'), name='alertrule_customer_on_a_job'),
                ),
                migrations.AddIndex(
                    model_name='alert',
                    index=models.Index(condition=models.Q(('state', 'resolved'), _negated=True), fields=['rule', 'key'], name='alert_open_rule_idx'),
                ),
                migrations.AddIndex(
                    model_name='alert',
                    index=models.Index(condition=models.Q(models.Q(('state', models.F('announced_state')), _negated=True), models.Q(('state', 'pending'), _negated=True)), fields=['id'], name='alert_unannounced_idx'),
                ),
                migrations.AddIndex(
                    model_name='alert',
                    index=models.Index(fields=['key', '-resolved_at'], name='alert_key_resolved_idx'),
                ),
                migrations.AddConstraint(
                    model_name='alert',
                    constraint=models.UniqueConstraint(condition=models.Q(('state', 'resolved'), _negated=True), fields=('key',), name='alert_open_key_unique'),
                ),
                migrations.AddConstraint(
                    model_name='alert',
                    constraint=models.CheckConstraint(condition=models.Q(('state__in', ['pending', 'firing', 'resolved'])), name='alert_state_valid'),
                ),
                migrations.AddIndex(
                    model_name='alertrun',
                    index=models.Index(fields=['run'], name='alertrun_run_idx'),
                ),
                migrations.AddConstraint(
                    model_name='alertrun',
                    constraint=models.UniqueConstraint(fields=('alert', 'run'), name='alertrun_unique'),
                ),
            ],
            database_operations=[
                migrations.RunSQL(_rename("supervisor", "alerting"), _rename("alerting", "supervisor")),
            ],
        ),
        migrations.RunPython(
            content_types_move("supervisor", "alerting"), content_types_move("alerting", "supervisor")
        ),
    ]

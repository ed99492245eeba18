"""The operator's audit (`OperatorAction`) moves from supervisor to ops, the operator's room
(issue 27), without moving data: the model's state is created here over the existing table
(`SeparateDatabaseAndState`; supervisor 0010 deletes it from supervisor's state), the table is
renamed (`ALTER TABLE ... RENAME`: no row is copied), and its content type is moved so its
permissions - and every group and user holding them - follow: `supervisor.resubmit_step`
becomes `ops.resubmit_step`, and so on. The shipped roles are then given their permissions again
(ops/roles.py names them `ops.*`)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.db import migrations, models

from ops.roles import roles_ensure

ACTIONS = [
    ("resubmit_step", "Resubmit step (Error -> Pending)"),
    ("resubmit_run", "New run of the same input"),
    ("compensate_run", "Compensate run on purpose"),
    ("retry_compensation", "Retry compensation step now"),
    ("mark_compensation_done", "Mark compensation done by hand"),
    ("breaker_open", "Open circuit breaker by hand"),
    ("breaker_close", "Close circuit breaker by hand"),
    ("bulk_resubmit", "Bulk resubmit"),
    ("cancel_run", "Cancel run"),
    ("resume_compensation", "Resume compensation (Failed -> Compensating)"),
    ("give_up_run", "Give run up (Compensating -> Failed)"),
]
PERMISSIONS = [
    ("resubmit_step", "Can resubmit a step in Error, or start a new run of a compensated run"),
    ("compensate_run", "Can compensate a run on purpose"),
    ("retry_compensation", "Can retry a failing compensation step now"),
    ("mark_compensation_done", "Can mark a compensation done by hand"),
    ("operate_breaker", "Can open or close a circuit breaker by hand"),
    ("bulk_resubmit", "Can resubmit failed steps in bulk"),
    ("view_sweep_preview", "Can see the dry run of the supervisor's next sweep"),
]


def _content_type_move(apps: Any, source: str, target: str) -> None:
    """The model's content type from `source` to `target` app label, keeping its id (so its
    permissions, and the groups and users holding them, follow). A twin made meanwhile under
    `target` (by a post_migrate on a database where it ran) is removed first."""
    content_type = apps.get_model("contenttypes", "ContentType")
    old = content_type.objects.filter(app_label=source, model="operatoraction").first()
    if old is None:
        return
    content_type.objects.filter(app_label=target, model="operatoraction").delete()
    old.app_label = target
    old.save(update_fields=["app_label"])


def forwards(apps: Any, schema_editor: Any) -> None:
    _content_type_move(apps, "supervisor", "ops")
    # Permissions are made after all migrations (post_migrate): make ops' missing ones now (on a
    # fresh database: those of the moved model came with it). Only ops': supervisor's state
    # still holds the model until supervisor 0010, and its content type would be made again.
    app_config = apps.get_app_config("ops")
    app_config.models_module = True
    create_permissions(app_config, apps=apps, verbosity=0)
    app_config.models_module = None
    roles_ensure(group_model=apps.get_model("auth", "Group"), permission_model=apps.get_model("auth", "Permission"))


def backwards(apps: Any, schema_editor: Any) -> None:
    _content_type_move(apps, "ops", "supervisor")


class Migration(migrations.Migration):
    dependencies = [
        ("ops", "0002_roles_staff_work"),
        ("supervisor", "0009_alertrule_name_and_recipients_checked"),
        ("scheduler", "0027_job_staff_work_permission"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="OperatorAction",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID"),
                        ),
                        ("action", models.CharField(choices=ACTIONS, max_length=40)),
                        ("actor_name", models.CharField(max_length=200)),
                        ("reason", models.TextField()),
                        ("target", models.CharField(blank=True, default="", max_length=200)),
                        ("detail", models.JSONField(blank=True, default=dict)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "actor",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "new_run",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="resubmitted_from",
                                to="scheduler.run",
                            ),
                        ),
                        (
                            "run",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="operator_actions",
                                to="scheduler.run",
                            ),
                        ),
                        (
                            "step",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                related_name="+",
                                to="scheduler.step",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "supervisor_operatoraction",
                        "ordering": ["-created_at", "-id"],
                        "permissions": PERMISSIONS,
                        "indexes": [
                            models.Index(
                                condition=models.Q(("run__isnull", False)),
                                fields=["run", "-created_at"],
                                name="opaction_run_idx",
                            ),
                            models.Index(
                                condition=models.Q(("new_run__isnull", False)),
                                fields=["new_run"],
                                name="opaction_new_run_idx",
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        # The table takes the app's name: a rename, no row copied.
        migrations.AlterModelTable(name="operatoraction", table=None),
        migrations.RunPython(forwards, backwards),
    ]

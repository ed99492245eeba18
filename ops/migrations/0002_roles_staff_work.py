"""The "Operators" role gets staff work (`scheduler.staff_work`, issue 26); the read-only role
and staff in no group never do (ops/roles.py)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

from ops.roles import roles_ensure


def forwards(apps: Any, schema_editor: Any) -> None:
    # Permissions are made after all migrations (post_migrate): make the new one now.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    roles_ensure(group_model=apps.get_model("auth", "Group"), permission_model=apps.get_model("auth", "Permission"))


def backwards(apps: Any, schema_editor: Any) -> None:
    group = apps.get_model("auth", "Group").objects.filter(name="Operators").first()
    if group is not None:
        group.permissions.remove(
            *apps.get_model("auth", "Permission").objects.filter(
                content_type__app_label="scheduler", codename="staff_work"
            )
        )


class Migration(migrations.Migration):
    dependencies = [
        ("ops", "0001_roles"),
        ("scheduler", "0027_job_staff_work_permission"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]

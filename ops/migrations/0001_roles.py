"""The shipped roles: "Operators (read-only)" and "Operators" (ops/roles.py says what each may do)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.management import create_permissions
from django.db import migrations

from ops.roles import OPERATOR_GROUP, READ_ONLY_GROUP, roles_ensure


def forwards(apps: Any, schema_editor: Any) -> None:
    # Permissions are made after all migrations (post_migrate); make them now, for every app
    # migrated so far, so the groups can be given them on a fresh database.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    roles_ensure(group_model=apps.get_model("auth", "Group"), permission_model=apps.get_model("auth", "Permission"))


def backwards(apps: Any, schema_editor: Any) -> None:
    apps.get_model("auth", "Group").objects.filter(name__in=[READ_ONLY_GROUP, OPERATOR_GROUP]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
        ("scheduler", "0019_claim_starts_runs_apart"),
        ("supervisor", "0007_operator_action"),
        ("orders", "0003_time_ordered_ids"),
        ("catalogue", "0001_initial"),
        ("exports", "0001_initial"),
        ("webhooks", "0001_initial"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]

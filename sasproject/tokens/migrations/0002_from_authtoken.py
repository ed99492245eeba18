"""DRF's authtoken kept keys in clear (`authtoken_token`). Each becomes an ApiToken holding only
its SHA-256 digest, expiring SAS_API_TOKEN_DAYS from now, so clients keep working until then;
then DRF's table and its migration records go. Not reversible: the clear keys are gone."""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import migrations
from django.utils import timezone

OLD_TABLE = "authtoken_token"


def clear_tokens_hashed(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection
    if OLD_TABLE not in connection.introspection.table_names():
        return
    api_token = apps.get_model("apitokens", "ApiToken")
    expires = timezone.now() + timedelta(days=int(settings.SAS_API_TOKEN_DAYS))
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT "key", "user_id", "created" FROM {OLD_TABLE}')  # noqa: S608
        rows = cursor.fetchall()
    api_token.objects.bulk_create(
        [
            api_token(
                user_id=user_id,
                digest=hashlib.sha256(key.encode()).hexdigest(),
                prefix=key[:8],
                created_at=created,
                expires_at=expires,
            )
            for key, user_id, created in rows
        ]
    )
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {OLD_TABLE}")
        cursor.execute("DELETE FROM django_migrations WHERE app = 'authtoken'")


class Migration(migrations.Migration):
    dependencies = [("apitokens", "0001_initial")]

    operations = [migrations.RunPython(clear_tokens_hashed, migrations.RunPython.noop, elidable=False)]

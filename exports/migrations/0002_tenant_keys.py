"""Issue 29, item 3: an export's primary key in the database is (id, owner_id) (decision record
90, scheduler/tenant_keys.py); UNIQUE (id) stays for the export file's single-column foreign key.
Django's state keeps `id` as the primary key; no state change."""

from django.db import migrations


def forwards(apps, schema_editor):
    from scheduler.tenant_keys import table_rekey

    table_rekey(schema_editor, table="exports_export", primary_key=["id", "owner_id"], unique_id=True)


def backwards(apps, schema_editor):
    from scheduler.tenant_keys import table_unkey

    table_unkey(schema_editor, table="exports_export")


class Migration(migrations.Migration):
    dependencies = [
        ("exports", "0001_initial"),
        ("scheduler", "0038_tenant_keys"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]

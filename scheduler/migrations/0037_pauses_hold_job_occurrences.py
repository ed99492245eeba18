"""Issue 30, item 3: a pause holds its scope's jobs' occurrences too (holds.sql's
sas_occurrences_hold, the scheduled_hold_if_paused trigger, sas_pause_release giving them back).
No schema change: the functions and triggers of holds.sql installed again."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions.statements import install_holds

    install_holds(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0036_log_tables_no_fk_constraints"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

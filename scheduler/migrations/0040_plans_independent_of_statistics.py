"""Issue 29, item 5: sas_step_fail's plan no longer rests on the statistics (the steps locked by
primary key, each attempt's history row closed by its lease). functions.sql reinstalled."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions.statements import install_functions, install_holds

    install_functions(schema_editor.connection)
    install_holds(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0039_run_owner_key'),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

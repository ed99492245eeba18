"""functions.sql changed (issue 20, fifth session): sas_step_pick joins nothing - each head
looks its owner's in-flight count up in a map, and the picked heads are locked one by one by
primary key - so a burst's stale statistics cannot turn it into one aggregation per head, or a
comparison of every head with every Pending row. Install it again."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0025_runs_insert_shapes"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

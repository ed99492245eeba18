"""functions.sql changed (issue 20): sas_runs_insert takes each workflow step's policy once per
batch (the run's shape) instead of once per step of every run, and the first step's payload per
run. Install it again; the old signature is dropped by the file."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0024_job_history_in_the_dispatcher"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

"""functions.sql changed (issue 27, the engine's cost per order): sas_step_succeed commits a
success after which the run goes on, unobserved, without waiting for the WAL flush
(docs/decisions.md, "An intermediate step's success commits without waiting for the WAL
flush"). Install it again."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0031_job_page_indexes"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

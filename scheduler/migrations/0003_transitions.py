"""Run.observed, and the engine's transitions as PostgreSQL functions (scheduler/sql/functions.sql).

A later change to functions.sql ships as a new migration that calls install_functions again
(CREATE OR REPLACE): the file is the single text of each function.
"""

from django.db import migrations, models


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduler', '0002_job'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='observed',
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text=(
                    'Someone listens to this run\'s events (a webhook subscriber): its transitions '
                    'send the run_event signal. Runs nobody watches cost no extra query per step.'
                ),
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

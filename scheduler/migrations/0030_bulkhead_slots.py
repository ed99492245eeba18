"""functions.sql changed (issue 26): the claims count each agent queue's Processing steps and
claim only into its free slots (sas_bulkhead, sas_in_flight, sas_step_admit; sas_step_pick,
sas_step_claim_due, sas_after_processed and sas_step_succeed take the bulkheads' limits).
Install it again."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0029_step_key_generation"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

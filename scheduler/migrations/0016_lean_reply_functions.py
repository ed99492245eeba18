from django.db import migrations


def install(apps, schema_editor):
    # sas_observed_events and sas_step_claim return at once when they have nothing to do, and a
    # success reply looks its run's events up only when the run is observed (issue 6).
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0015_step_compensates_partial_unique"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

from django.db import migrations


def install(apps, schema_editor):
    # sas_step_claim: the run's start (Pending -> Running and its event) is a statement of its
    # own, run only for a run's first claim; a claim of a running run's next step touches
    # neither the run nor the event table (issue 6).
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0018_row_checks"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

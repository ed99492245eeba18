from django.db import migrations


def install(apps, schema_editor):
    # sas_runs_insert: runs, steps, events (and jobs' history rows) in one statement, planned
    # once per session - run_submit's one run as much as the jobs dispatcher's batches (issue 6).
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0016_lean_reply_functions"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

"""functions.sql changed (issue 20: every job history write is the jobs dispatcher's): sas_runs_insert
no longer writes a job occurrence's "started" history row (the dispatcher's `job_history_open`
does), and sas_run_skip_unstarted no longer closes it (the dispatcher's settle does, in
`job_history_close`). Install it again; the old sas_runs_insert signature is dropped by the file."""

from django.db import migrations


def install(apps, schema_editor):
    from scheduler.transitions import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0023_alert_rule_indexes"),
    ]

    operations = [
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

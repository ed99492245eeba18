"""The alert models are alerting's now (issue 27): removed from supervisor's state only. Their
tables were renamed and their content types moved by alerting 0002, which runs before this."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("supervisor", "0009_alertrule_name_and_recipients_checked"),
        ("alerting", "0002_alert_models_from_supervisor"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(model_name="alertrun", name="alert"),
                migrations.RemoveField(model_name="alertrule", name="job"),
                migrations.RemoveField(model_name="alertrule", name="owner"),
                migrations.RemoveField(model_name="alertrun", name="run"),
                migrations.DeleteModel(name="Alert"),
                migrations.DeleteModel(name="AlertRule"),
                migrations.DeleteModel(name="AlertRun"),
            ],
            database_operations=[],
        ),
    ]

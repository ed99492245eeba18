"""`OperatorAction` leaves supervisor's state for ops, the operator's room (issue 27): ops 0003
took over its table (renamed, no row moved) and its content type (so its permissions follow)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("supervisor", "0010_alert_models_to_alerting"),
        ("ops", "0003_operator_action_moved"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="OperatorAction")],
            database_operations=[],
        ),
    ]

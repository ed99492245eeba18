"""Issue 29, item 1: the operator's audit becomes range-partitioned by month of created_at
(scheduler/partitions.py; a few rows a day, so months, not days), its rows moved, its primary key
(id, created_at). No owner column: the audit is the operator's, not a tenant's (decision record
42). Reversible
(back to a plain table), for the migration tests."""

from django.db import migrations


def partition(apps, schema_editor):
    from ops.storage.tables import AUDIT
    from scheduler.partition_convert import table_partition_by_range

    table_partition_by_range(schema_editor, spec=AUDIT, primary_key=["id", "created_at"], periods_ahead=2)


def unpartition(apps, schema_editor):
    from ops.storage.tables import AUDIT
    from scheduler.partition_convert import table_unpartition

    table_unpartition(schema_editor, spec=AUDIT)


class Migration(migrations.Migration):
    dependencies = [
        ("ops", "0004_operator_action_pause_resume"),
        ("scheduler", "0034_history_partitioned"),
    ]

    operations = [migrations.RunPython(partition, unpartition)]

"""Issue 29, item 1: the attempt and job history and the run events become range-partitioned by
day (scheduler/partitions.py), their rows moved (scheduler/partition_convert.py), each gaining its
owner's user id (filled by the database on insert) in its primary key:
(id, started_at, owner_id) and (id, created_at, owner_id); event_id unique with both.

Django's state keeps `id` as the models' primary key (what the ORM reads and writes by); the
database's keys are wider (decision record 42). Reversible (back to plain tables, the owners dropped), for the migration tests.
"""

from django.db import migrations, models

import scheduler.ids


def partition(apps, schema_editor):
    from scheduler.partition_convert import table_partition_by_range
    from scheduler.partitions import EVENTS, HISTORY

    table_partition_by_range(
        schema_editor,
        spec=HISTORY,
        primary_key=["id", "started_at", "owner_id"],
        owner_fill="sas_history_owner_fill",
    )
    table_partition_by_range(
        schema_editor,
        spec=EVENTS,
        primary_key=["id", "created_at", "owner_id"],
        unique={"runevent_event_id_unique": ["event_id", "created_at", "owner_id"]},
        owner_fill="sas_event_owner_fill",
    )


def unpartition(apps, schema_editor):
    from scheduler.partition_convert import table_unpartition
    from scheduler.partitions import EVENTS, HISTORY

    table_unpartition(schema_editor, spec=HISTORY, drop_owner=True)
    table_unpartition(
        schema_editor, spec=EVENTS, unique={"scheduler_runevent_event_id_key": ["event_id"]}, drop_owner=True
    )


OWNER = dict(blank=True, editable=False, help_text="The owner's user id (filled on insert; 0: no owner).", null=True)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0033_concurrency_keys_and_pauses"),
        ("webhooks", "0002_event_link_without_constraint"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(model_name="runevent", name="owner_id", field=models.IntegerField(**OWNER)),
                migrations.AddField(
                    model_name="taskexecutionhistory", name="owner_id", field=models.IntegerField(**OWNER)
                ),
                migrations.AlterField(
                    model_name="runevent",
                    name="event_id",
                    field=models.UUIDField(default=scheduler.ids.uuid7, editable=False),
                ),
                migrations.AddConstraint(
                    model_name="runevent",
                    constraint=models.UniqueConstraint(
                        fields=("event_id", "created_at", "owner_id"), name="runevent_event_id_unique"
                    ),
                ),
            ],
            database_operations=[migrations.RunPython(partition, unpartition)],
        ),
    ]

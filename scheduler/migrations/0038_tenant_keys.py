"""Issue 29, item 3: the tenant tables' keys hold their owner (seed 004: Jobs keyed by (UserId,
JobId), UserId the shard key), so they could be distributed by owner (Citus) without a schema
change. Decision record 55; scheduler/tenant_keys.py does the work; the catalog test
tests/scheduler/test_tenant_keys.py asserts the result.

In this order, in one transaction (a primary key cannot be dropped while foreign keys use it):
1. the tables below a job (next/queued rows, dependency edges, gates) gain the job's owner
   (`owner_id`, NOT NULL, copied from the job; a trigger fills it on insert when a writer leaves
   it out);
2. scheduler_job: every foreign key to it dropped, PRIMARY KEY (id, owner_id), UNIQUE (id) for
   the one single-column foreign key left (alert rules: an operator's rule has no owner), the
   others back as composite ones ((job_id, owner_id) -> (id, owner_id)) - runs' included;
3. the tables below a job: PRIMARY KEY (id, owner_id) (nothing references them), their unique
   keys with the owner (last: the indexes still serve lookups by job);
4. scheduler_step: PRIMARY KEY (id, owner_id), UNIQUE (id) for the four single-column foreign
   keys to it; (run_id, seq), the compensation's and the idempotency key's unique keys with the
   owner.

Django's state keeps `id` as the models' primary key. Reversible, for the migration tests.
"""

from django.db import migrations, models

OWNER_HELP = "The job's owner (user id; filled on insert)."
OWNER = dict(null=True, blank=True, editable=False, help_text=OWNER_HELP)

BELOW_JOB = [
    # (table, its job column, its fill trigger)
    ("scheduler_scheduledjob", "job_id", "scheduledjob_owner_fill"),
    ("scheduler_jobdependency", "child_id", "jobdependency_owner_fill"),
    ("scheduler_dependencygate", "child_id", "dependencygate_owner_fill"),
]

DEFERRED = "DEFERRABLE INITIALLY DEFERRED"
# The foreign keys to scheduler_job that become composite (name -> (referencing table, column)).
COMPOSITE = {
    "scheduler_scheduledjob_job_id_96b2b24d_fk_scheduler_job_id": ("scheduler_scheduledjob", "job_id"),
    "scheduler_jobdependency_parent_id_0135004d_fk_scheduler_job_id": ("scheduler_jobdependency", "parent_id"),
    "scheduler_jobdependency_child_id_9bc3d504_fk_scheduler_job_id": ("scheduler_jobdependency", "child_id"),
    "scheduler_dependencygate_child_id_67a09e8a_fk_scheduler_job_id": ("scheduler_dependencygate", "child_id"),
    "scheduler_run_job_id_2ad7fd9b_fk_scheduler_job_id": ("scheduler_run", "job_id"),
}


def forwards(apps, schema_editor):
    from scheduler.tenant_keys import owner_column_add, table_rekey

    for table, column, trigger in BELOW_JOB:
        owner_column_add(schema_editor, table=table, job_column=column, trigger=trigger)
    table_rekey(
        schema_editor,
        table="scheduler_job",
        primary_key=["id", "owner_id"],
        unique_id=True,
        replaced={
            name: f"FOREIGN KEY ({column}, owner_id) REFERENCES scheduler_job(id, owner_id) {DEFERRED}"
            for name, (_, column) in COMPOSITE.items()
        },
    )
    for table, _, _ in BELOW_JOB:
        table_rekey(schema_editor, table=table, primary_key=["id", "owner_id"], unique_id=False)
    table_rekey(schema_editor, table="scheduler_step", primary_key=["id", "owner_id"], unique_id=True)


def backwards(apps, schema_editor):
    from scheduler.tenant_keys import owner_column_drop, table_unkey

    table_unkey(schema_editor, table="scheduler_step")
    for table, _, _ in BELOW_JOB:
        table_unkey(schema_editor, table=table)
    table_unkey(
        schema_editor,
        table="scheduler_job",
        restored={
            name: (table, f"FOREIGN KEY ({column}) REFERENCES scheduler_job(id) {DEFERRED}")
            for name, (table, column) in COMPOSITE.items()
        },
    )
    for table, _, trigger in BELOW_JOB:
        owner_column_drop(schema_editor, table=table, trigger=trigger)


class Migration(migrations.Migration):
    # One transaction for the whole file (the default on PostgreSQL). No dependency on the alert
    # rules' app: table_rekey finds and keeps their foreign key to a job whatever its table's name.
    dependencies = [
        ("scheduler", "0037_pauses_hold_job_occurrences"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(model_name="scheduledjob", name="owner_id", field=models.IntegerField(**OWNER)),
                migrations.AddField(model_name="jobdependency", name="owner_id", field=models.IntegerField(**OWNER)),
                migrations.AddField(model_name="dependencygate", name="owner_id", field=models.IntegerField(**OWNER)),
            ],
            database_operations=[migrations.RunPython(forwards, backwards)],
        ),
        # The unique keys with the owner (Django's own operations: the state and the database
        # agree on these).
        migrations.RemoveConstraint(model_name="scheduledjob", name="scheduledjob_one_next_per_job"),
        migrations.AddConstraint(
            model_name="scheduledjob",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "next")),
                fields=("job", "owner_id"),
                name="scheduledjob_one_next_per_job",
            ),
        ),
        migrations.RemoveConstraint(model_name="scheduledjob", name="scheduledjob_occurrence_unique"),
        migrations.AddConstraint(
            model_name="scheduledjob",
            constraint=models.UniqueConstraint(
                fields=("job", "scheduled_for", "attempt", "owner_id"), name="scheduledjob_occurrence_unique"
            ),
        ),
        migrations.RemoveConstraint(model_name="jobdependency", name="jobdependency_edge_unique"),
        migrations.AddConstraint(
            model_name="jobdependency",
            constraint=models.UniqueConstraint(
                fields=("child", "parent", "owner_id"), name="jobdependency_edge_unique"
            ),
        ),
        migrations.RemoveConstraint(model_name="dependencygate", name="dependencygate_child_time_unique"),
        migrations.AddConstraint(
            model_name="dependencygate",
            constraint=models.UniqueConstraint(
                fields=("child", "logical_time", "owner_id"), name="dependencygate_child_time_unique"
            ),
        ),
        migrations.RemoveConstraint(model_name="step", name="step_run_seq_unique"),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(fields=("run", "seq", "owner_id"), name="step_run_seq_unique"),
        ),
        migrations.RemoveConstraint(model_name="step", name="step_compensates_unique"),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                condition=models.Q(("compensates__isnull", False)),
                fields=("compensates", "owner_id"),
                name="step_compensates_unique",
            ),
        ),
        migrations.AlterField(
            model_name="step", name="idempotency_key", field=models.CharField(max_length=200)
        ),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                fields=("idempotency_key", "owner_id"), name="step_idempotency_key_unique"
            ),
        ),
    ]

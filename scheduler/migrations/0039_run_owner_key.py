"""Issue 29, item 3 (continued): runs keyed by owner. A run's owner is NULL for the platform's
own runs, and neither a primary key nor a distribution column takes a NULL, so the run gains
`owner_key` - the owner, 0 for nobody's, a stored generated column (the value its steps and
history already carry) - and the database's PRIMARY KEY becomes (id, owner_key), a UNIQUE (id)
staying for the foreign keys to a run by its id alone (steps, alerts, checkpoints, heartbeat
rows, exports, orders, webhook subscriptions and deliveries). The unique occurrence key holds it
too, and so does the run's foreign key to its job, (job_id, owner_key); functions.sql's runs_insert names the new key in its ON CONFLICT (installed again).
Decision record 55. Reversible."""

import django.db.models.functions.comparison
from django.db import migrations, models


JOB_FK = "scheduler_run_job_id_2ad7fd9b_fk_scheduler_job_id"
JOB_FK_DEF = (
    "ALTER TABLE scheduler_run ADD CONSTRAINT {} FOREIGN KEY (job_id, {}) REFERENCES scheduler_job(id, owner_id)"
    " DEFERRABLE INITIALLY DEFERRED"
)


def forwards(apps, schema_editor):
    from scheduler.tenant_keys import table_rekey

    schema_editor.execute("ALTER TABLE scheduler_run ALTER COLUMN owner_key SET NOT NULL")
    table_rekey(schema_editor, table="scheduler_run", primary_key=["id", "owner_key"], unique_id=True)
    # A job's run is its owner's: the foreign key to the job by the tenant key (never NULL, so
    # checked for every run of a job, where (job_id, owner_id) let a run with no owner through).
    schema_editor.execute(f"ALTER TABLE scheduler_run DROP CONSTRAINT {JOB_FK}")
    schema_editor.execute(JOB_FK_DEF.format(JOB_FK, "owner_key"))


def backwards(apps, schema_editor):
    from scheduler.tenant_keys import table_unkey

    schema_editor.execute(f"ALTER TABLE scheduler_run DROP CONSTRAINT {JOB_FK}")
    schema_editor.execute(JOB_FK_DEF.format(JOB_FK, "owner_id"))
    table_unkey(schema_editor, table="scheduler_run")


def install(apps, schema_editor):
    from scheduler.transitions.statements import install_functions

    install_functions(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduler", "0038_tenant_keys"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="owner_key",
            field=models.GeneratedField(
                db_persist=True,
                expression=django.db.models.functions.comparison.Coalesce("owner", 0),
                help_text="The owner's user id, 0 for the platform's own runs (the tenant key).",
                output_field=models.IntegerField(),
            ),
        ),
        migrations.RunPython(forwards, backwards),
        migrations.RemoveConstraint(model_name="run", name="run_job_occurrence_unique"),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=models.Q(("job__isnull", False)),
                fields=("job", "scheduled_for", "job_attempt", "owner_key"),
                name="run_job_occurrence_unique",
            ),
        ),
        migrations.RunPython(install, migrations.RunPython.noop),
    ]

"""Issue 29, item 3: the tenant tables' keys hold their owner (decision record 55). The catalog
(pg_index, pg_constraint) is read as the migrations left it: every primary and unique key of a
tenant table holds `owner_id`, but for the ones listed here with why; the foreign keys between
a job and the rows below it are composite; the database fills and checks the owner."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction

from scheduler.models import DependencyGate, JobDependency, Run, ScheduledJob
from tests.scheduler.jobs_support import new_job

pytestmark = pytest.mark.django_db

# Every table that holds one user's data (the seed's "tenant").
TENANT_TABLES = [
    "scheduler_job",
    "scheduler_scheduledjob",
    "scheduler_jobdependency",
    "scheduler_dependencygate",
    "scheduler_run",
    "scheduler_step",
    "scheduler_taskexecutionhistory",
    "scheduler_runevent",
    "alerting_alertrule",
    "exports_export",
]
# The owner column (the distribution column on Citus): `owner_id` but where the owner may be
# NULL (the platform's own runs), there a generated column, the owner or 0.
OWNER_COLUMN = {"scheduler_run": "owner_key"}

# The unique keys that still lack the owner, and why (decision record 55 says the same).
WITHOUT_OWNER = {
    # alerting_alertrule.job_id: an operator's rule (owner NULL) may watch any customer's job.
    "scheduler_job_id_key": "UNIQUE (id)",
    # alerting_alert.step_id, scheduler_checkpoint.step_id, scheduler_heartbeatstatus.step_id and
    # scheduler_step.compensates_id reference a step by its id alone.
    "scheduler_step_id_key": "UNIQUE (id)",
    # exports_exportfile.export_id references an export by its id alone.
    "exports_export_id_key": "UNIQUE (id)",
    # One export per run (OneToOneField); the run is not keyed by owner (below).
    "exports_export_run_id_key": "UNIQUE (run_id)",
    # Steps, alerts and their runs, checkpoints, heartbeat rows, exports, orders, webhook
    # subscriptions and deliveries reference a run by its id alone.
    "scheduler_run_id_key": "UNIQUE (id)",
    # An operator's alert rule has no owner, as above.
    "supervisor_alertrule_pkey": "PRIMARY KEY (id)",
    "alertrule_operator_name_unique": "UNIQUE (name) WHERE owner_id IS NULL",
}


def _rows(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall()


def _unique_keys() -> dict[str, tuple[str, list[str], bool]]:
    """Every unique index (primary keys and partial ones included) of the tenant tables:
    name -> (table, columns, primary)."""
    rows = _rows(
        "SELECT c.relname, i.indrelid::regclass::text, i.indisprimary,"
        " ARRAY(SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)"
        "       JOIN pg_attribute AS a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.n)"
        " FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indexrelid"
        " WHERE i.indisunique AND i.indrelid::regclass::text = ANY(%s)",
        [TENANT_TABLES],
    )
    return {name: (table, list(columns), primary) for name, table, primary, columns in rows}


def test_tenant_keys__every_primary_and_unique_key_holds_the_owner_but_the_listed() -> None:
    keys = _unique_keys()
    assert {table for table, _, _ in keys.values()} == set(TENANT_TABLES)
    without = {
        name
        for name, (table, columns, _) in keys.items()
        if OWNER_COLUMN.get(table, "owner_id") not in columns
    }
    assert without == set(WITHOUT_OWNER)
    primary = {table: columns for table, columns, is_primary in keys.values() if is_primary}
    assert primary == {
        "scheduler_job": ["id", "owner_id"],
        "scheduler_scheduledjob": ["id", "owner_id"],
        "scheduler_jobdependency": ["id", "owner_id"],
        "scheduler_dependencygate": ["id", "owner_id"],
        "scheduler_run": ["id", "owner_key"],
        "scheduler_step": ["id", "owner_id"],
        "scheduler_taskexecutionhistory": ["id", "started_at", "owner_id"],
        "scheduler_runevent": ["id", "created_at", "owner_id"],
        "alerting_alertrule": ["id"],
        "exports_export": ["id", "owner_id"],
    }
    unique = {name: columns for name, (_, columns, primary) in keys.items() if not primary}
    assert unique == {
        "job_owner_name_unique": ["owner_id", "name"],
        "scheduler_job_id_key": ["id"],
        "scheduledjob_one_next_per_job": ["job_id", "owner_id"],
        "scheduledjob_occurrence_unique": ["job_id", "scheduled_for", "attempt", "owner_id"],
        "jobdependency_edge_unique": ["child_id", "parent_id", "owner_id"],
        "dependencygate_child_time_unique": ["child_id", "logical_time", "owner_id"],
        "run_job_occurrence_unique": ["job_id", "scheduled_for", "job_attempt", "owner_key"],
        "scheduler_run_id_key": ["id"],
        "scheduler_step_id_key": ["id"],
        "step_run_seq_unique": ["run_id", "seq", "owner_id"],
        "step_idempotency_key_unique": ["idempotency_key", "owner_id"],
        "step_compensates_unique": ["compensates_id", "owner_id"],
        "runevent_event_id_unique": ["event_id", "created_at", "owner_id"],
        "alertrule_owner_name_unique": ["owner_id", "name"],
        "alertrule_operator_name_unique": ["name"],
        "exports_export_id_key": ["id"],
        "exports_export_run_id_key": ["run_id"],
    }


def test_tenant_keys__the_owner_column_is_never_null() -> None:
    nullable = _rows(
        "SELECT table_name, column_name FROM information_schema.columns WHERE column_name IN"
        " ('owner_id', 'owner_key') AND is_nullable = 'YES' AND table_name = ANY(%s) ORDER BY 1",
        [TENANT_TABLES],
    )
    # A run's owner_id (its foreign key to the user) is NULL for the platform's runs, its
    # owner_key never; an operator's alert rule has no owner (above).
    assert nullable == [("alerting_alertrule", "owner_id"), ("scheduler_run", "owner_id")]
    generated = _rows(
        "SELECT attgenerated, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute AS a"
        " JOIN pg_attrdef AS d ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
        " WHERE a.attrelid = 'scheduler_run'::regclass AND a.attname = 'owner_key'"
    )
    assert generated == [("s", "COALESCE(owner_id, 0)")]


def test_tenant_keys__foreign_keys_to_a_job_carry_the_owner_but_the_alert_rules() -> None:
    rows = _rows(
        "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE contype = 'f' AND confrelid = 'scheduler_job'::regclass ORDER BY 1, 2"
    )
    deferred = "DEFERRABLE INITIALLY DEFERRED"
    composite = "FOREIGN KEY ({}, owner_id) REFERENCES scheduler_job(id, owner_id) " + deferred
    assert rows == [
        ("alerting_alertrule", f"FOREIGN KEY (job_id) REFERENCES scheduler_job(id) {deferred}"),
        ("scheduler_dependencygate", composite.format("child_id")),
        ("scheduler_jobdependency", composite.format("child_id")),
        ("scheduler_jobdependency", composite.format("parent_id")),
        (
            "scheduler_run",
            f"FOREIGN KEY (job_id, owner_key) REFERENCES scheduler_job(id, owner_id) {deferred}",
        ),
        ("scheduler_scheduledjob", composite.format("job_id")),
    ]


@pytest.fixture
def two_owners(django_user_model: Any) -> tuple[Any, Any]:
    return django_user_model.objects.create(username="ann"), django_user_model.objects.create(username="cy")


def _refused(write: Any) -> None:
    """`write` is refused by a foreign key: checked now (they are deferred), not at a commit the
    test never reaches; rolled back to before it."""
    with transaction.atomic():
        write()
        with pytest.raises(IntegrityError, match="foreign key"), connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        transaction.set_rollback(True)


def test_owner__left_out_by_a_writer__is_the_jobs(two_owners: tuple[Any, Any]) -> None:
    ann, _ = two_owners
    job = new_job(ann)
    at = datetime(2031, 1, 1, tzinfo=UTC)
    row = ScheduledJob.objects.create(job=job, kind="queued", scheduled_for=at, next_execution_at=at)
    gate = DependencyGate.objects.create(child=job, logical_time=at)
    assert ScheduledJob.objects.get(pk=row.pk).owner_id == ann.id
    assert DependencyGate.objects.get(pk=gate.pk).owner_id == ann.id
    # job_create's own next row names the owner.
    assert ScheduledJob.objects.get(job=job, kind="next").owner_id == ann.id


def test_run_owner_key__is_the_owner_or_0(two_owners: tuple[Any, Any]) -> None:
    ann, _ = two_owners
    mine = Run.objects.create(workflow="w", owner=ann)
    platform = Run.objects.create(workflow="w")
    keys = dict(Run.objects.filter(pk__in=[mine.pk, platform.pk]).values_list("id", "owner_key"))
    assert keys == {mine.pk: ann.id, platform.pk: 0}


def test_owner__of_another_user__is_refused_by_the_database(two_owners: tuple[Any, Any]) -> None:
    ann, cy = two_owners
    mine, theirs = new_job(ann, "a"), new_job(cy, "c")
    at = datetime(2031, 1, 1, tzinfo=UTC)
    _refused(lambda: ScheduledJob.objects.create(job=mine, owner_id=cy.id, kind="queued", scheduled_for=at))
    # An edge between two owners' jobs: refused by the services, and now by the database too.
    _refused(lambda: JobDependency.objects.create(parent=theirs, child=mine))
    assert not JobDependency.objects.exists()
    assert ScheduledJob.objects.filter(kind="queued").count() == 0
    # The same rows with the right owner are taken.
    ScheduledJob.objects.create(job=mine, owner_id=ann.id, kind="queued", scheduled_for=at)
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    assert ScheduledJob.objects.filter(kind="queued").count() == 1

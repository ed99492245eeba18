"""Issue 29: history partitioned by time, made ahead; retention dropping exactly the expired
partitions after archiving them; an archive loaded back; the runs' purge and what it never
touches; the tenant keys of the history tables."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from alerting.models import Alert, AlertRun
from ops.models import OperatorAction, RetentionPolicy
from ops.storage.purge import runs_purge
from ops.storage.retention import partitions_drop_expired, partitions_make_ahead
from ops.storage.tables import AUDIT, KEPT_TABLES
from scheduler.models import Job, Run, RunEvent, Step, TaskExecutionHistory
from scheduler.partitions import EVENTS, HISTORY, partition_ensure, partitions_list

pytestmark = pytest.mark.django_db

# Dates in the future: no partition the migration made is among them.
TODAY = date(2031, 3, 10)
NOW = datetime(2031, 3, 10, 12, 0, tzinfo=UTC)


def _committed() -> None:
    """Run the deferred foreign key checks of the rows written so far, as their commit would: a
    partition with pending checks cannot be dropped in the same transaction."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")


@pytest.fixture
def owner(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user(username="tenant-a")


@pytest.fixture
def sas(settings: Any, tmp_path: Path) -> dict[str, Any]:
    settings.SAS = {**settings.SAS, "ARCHIVE_DIR": str(tmp_path), "PARTITIONS_AHEAD_DAYS": 3}
    return settings.SAS


def _names(spec: Any) -> set[str]:
    return {p.name for p in partitions_list(spec)}


def _history(run: Run | None, at: datetime, **extra: Any) -> TaskExecutionHistory:
    return TaskExecutionHistory.objects.create(run=run, status="succeeded", started_at=at, **extra)


def _run(owner: Any, *, state: str = "completed", age_days: float = 60, **extra: Any) -> Run:
    run = Run.objects.create(workflow="order_fulfilment", input={}, owner=owner, state=state, **extra)
    at = timezone.now() - timedelta(days=age_days)
    Run.objects.filter(pk=run.pk).update(created_at=at, finished_at=at if state != "running" else None)
    Step.objects.create(
        run=run, seq=0, name="reserve", operation="inventory.reserve", idempotency_key=f"{run.pk}:0"
    )
    RunEvent.objects.create(run=run, type="completed")
    _history(run, timezone.now())
    return run


def test_partitions__made_ahead_for_every_kept_table(sas: dict[str, Any]) -> None:
    made = partitions_make_ahead(today=NOW)

    for day in range(4):
        assert f"scheduler_taskexecutionhistory_p{TODAY + timedelta(days=day):%Y%m%d}" in _names(HISTORY)
        assert f"scheduler_runevent_p{TODAY + timedelta(days=day):%Y%m%d}" in _names(EVENTS)
    assert "scheduler_taskexecutionhistory_p20310314" not in _names(HISTORY)
    assert "ops_operatoraction_p203103" in _names(AUDIT)
    assert "ops_operatoraction_p203104" not in _names(AUDIT)  # 3 days ahead stays in March
    assert len(made) == 4 + 4 + 1
    assert partitions_make_ahead(today=NOW) == []  # idempotent


def test_partitions__rows_in_the_default__moved_into_their_own(owner: Any, sas: dict[str, Any]) -> None:
    """A row whose day had no partition waits in the default; making the day's partition moves it."""
    old = datetime(2020, 1, 15, 8, tzinfo=UTC)
    row = _history(
        None, old, kind="job", job=Job.objects.create(owner=owner, name="j", workflow="w", input={})
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM scheduler_taskexecutionhistory_default WHERE id = %s", [row.pk])
        assert cursor.fetchone()[0] == 1

    partitions_make_ahead(today=NOW)

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text, owner_id FROM scheduler_taskexecutionhistory WHERE id = %s",
            [row.pk],
        )
        assert cursor.fetchone() == ("scheduler_taskexecutionhistory_p20200115", owner.pk)


def _midnight(day: date, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=UTC)


def test_retention__drops_exactly_the_expired_partitions__archived_first(
    owner: Any, sas: dict[str, Any]
) -> None:
    now = timezone.now()
    today = now.astimezone(UTC).date()
    for days_ago in range(34):
        partition_ensure(HISTORY, today - timedelta(days=days_ago))
    run = _run(owner, age_days=1)
    # 30 days of retention: a day's partition goes once its end is 30 days old (31 days ago and
    # before); the one 30 days ago still holds rows younger than that.
    expired_row = _history(run, _midnight(today - timedelta(days=31), 23, 59), worker="expired")
    kept_row = _history(run, _midnight(today - timedelta(days=30), 0, 1), worker="kept")
    _committed()

    done = partitions_drop_expired(now=now, tables=(KEPT_TABLES[0],))

    expected = [f"scheduler_taskexecutionhistory_p{today - timedelta(days=k):%Y%m%d}" for k in (33, 32, 31)]
    assert done.dropped == expected
    left = _names(HISTORY)
    assert not left & set(expected)
    assert {f"scheduler_taskexecutionhistory_p{today - timedelta(days=k):%Y%m%d}" for k in range(31)} <= left
    assert "scheduler_taskexecutionhistory_default" in left
    assert not TaskExecutionHistory.objects.filter(pk=expired_row.pk).exists()
    assert TaskExecutionHistory.objects.filter(pk=kept_row.pk).exists()
    folder = Path(sas["ARCHIVE_DIR"]) / "scheduler_taskexecutionhistory"
    assert done.archived == {
        str(folder / f"{name}.jsonl.gz"): (1 if name == expected[-1] else 0) for name in expected
    }
    with gzip.open(folder / f"{expected[-1]}.jsonl.gz", "rt") as lines:
        (line,) = lines.readlines()
    assert json.loads(line)["worker"] == "expired" and json.loads(line)["owner_id"] == owner.pk


def test_retention__a_reader_of_the_runs_does_not_hold_up_the_drop(
    owner: Any, sas: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropping a partition takes no lock on the engine's tables (decision record 51): with a
    transaction of another connection reading scheduler_run, _step and _job (as every worker's
    does) the drop goes through at its first try, within a 1 s lock timeout. While the history
    had foreign keys to them, the drop waited for an ACCESS EXCLUSIVE lock on each."""
    import psycopg

    from scheduler import partitions

    monkeypatch.setattr(partitions, "DDL_LOCK_TIMEOUT", "1s")
    monkeypatch.setattr(partitions, "DROP_ATTEMPTS", 1)
    day = timezone.now().astimezone(UTC).date() - timedelta(days=45)
    partition_ensure(HISTORY, day)
    partition_ensure(EVENTS, day)
    name = f"scheduler_taskexecutionhistory_p{day:%Y%m%d}"
    db = connection.settings_dict
    with psycopg.connect(
        dbname=db["NAME"], host=db["HOST"], port=db["PORT"] or 5432, user=db["USER"], password=db["PASSWORD"]
    ) as reader:
        reader.execute(
            "SELECT (SELECT count(*) FROM scheduler_run), (SELECT count(*) FROM scheduler_step),"
            " (SELECT count(*) FROM scheduler_job), (SELECT count(*) FROM auth_user)"
        )  # its transaction stays open, holding those tables' ACCESS SHARE locks
        done = partitions_drop_expired(now=timezone.now(), tables=KEPT_TABLES[:2])
        reader.rollback()

    assert name in done.dropped and f"scheduler_runevent_p{day:%Y%m%d}" in done.dropped
    assert name not in _names(HISTORY)


def test_archive__loaded_back_into_a_table_of_its_own(owner: Any, sas: dict[str, Any]) -> None:
    day = timezone.now().astimezone(UTC).date() - timedelta(days=40)
    partition_ensure(HISTORY, day)
    run = _run(owner, age_days=1)
    rows = [_history(run, _midnight(day, h), worker=f"w{h}", detail={"h": h}) for h in range(5)]
    _committed()
    partitions_drop_expired(now=timezone.now(), tables=(KEPT_TABLES[0],))
    name = f"scheduler_taskexecutionhistory_p{day:%Y%m%d}"
    path = Path(sas["ARCHIVE_DIR"]) / "scheduler_taskexecutionhistory" / f"{name}.jsonl.gz"

    call_command("storage_archive_load", str(path))

    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, worker, detail, owner_id, run_id FROM archive_{name} ORDER BY id")
        loaded = cursor.fetchall()
    as_read = [
        (pk, worker, json.loads(detail), owner_id, run_id) for pk, worker, detail, owner_id, run_id in loaded
    ]
    assert as_read == [(r.pk, r.worker, r.detail, owner.pk, run.pk) for r in rows]


def test_archive_load__not_an_archive__refused_nothing_made(tmp_path: Path) -> None:
    stray = tmp_path / "elsewhere" / "x.jsonl.gz"
    with pytest.raises(CommandError, match="no archive"):
        call_command("storage_archive_load", str(stray))
    missing = tmp_path / "scheduler_runevent" / "scheduler_runevent_p20310101.jsonl.gz"
    with pytest.raises(CommandError, match="nothing loaded"):
        call_command("storage_archive_load", str(missing))
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('archive_scheduler_runevent_p20310101')")
        assert cursor.fetchone()[0] is None


def test_retention__not_positive__refused(sas: dict[str, Any]) -> None:
    sas["RETENTION_EVENTS_DAYS"] = 0
    with pytest.raises(ValueError, match="positive"):
        partitions_drop_expired(now=NOW, tables=(KEPT_TABLES[1],))


def test_purge__only_terminal_runs_nothing_still_needs(
    owner: Any, sas: dict[str, Any], django_user_model: Any
) -> None:
    operator = django_user_model.objects.create_user(username="op")
    plain = _run(owner)
    resolved_alert = _run(owner)
    Alert.objects.create(
        kind="workflow_failure_rate", message="m", key="k1", state="resolved", run=resolved_alert
    )
    in_flight = _run(owner, state="running")
    compensating = _run(owner, state="compensating")
    recent = _run(owner, age_days=5)
    linked = _run(owner)
    AlertRun.objects.create(
        alert=Alert.objects.create(kind="workflow_failure_rate", message="m", key="k2"), run=linked
    )
    first_of_alert = _run(owner)
    Alert.objects.create(kind="workflow_failure_rate", message="m", key="k3", run=first_of_alert)
    audited = _run(owner)
    resubmitted = _run(owner)
    OperatorAction.objects.create(
        action="resubmit_run", run=audited, new_run=resubmitted, actor=operator, reason="r"
    )

    purged = runs_purge(now=timezone.now())

    assert purged == 2
    gone = {plain.pk, resolved_alert.pk}
    assert not Run.objects.filter(pk__in=gone).exists()
    assert not Step.objects.filter(run_id__in=gone).exists()
    assert not RunEvent.objects.filter(run_id__in=gone).exists()
    assert not TaskExecutionHistory.objects.filter(run_id__in=gone).exists()
    kept = {
        in_flight.pk,
        compensating.pk,
        recent.pk,
        linked.pk,
        first_of_alert.pk,
        audited.pk,
        resubmitted.pk,
    }
    assert set(Run.objects.values_list("pk", flat=True)) == kept
    assert Step.objects.filter(run_id__in=kept).count() == len(kept)


def test_purge__bounded_batches(owner: Any, sas: dict[str, Any]) -> None:
    for _ in range(7):
        _run(owner)
    sas.update(RETENTION_PURGE_BATCH=2, RETENTION_PURGE_BATCHES=3)

    assert runs_purge(now=timezone.now()) == 6
    assert Run.objects.count() == 1
    assert runs_purge(now=timezone.now()) == 1


def test_purge__a_customers_shorter_retention__theirs_only(
    owner: Any, sas: dict[str, Any], django_user_model: Any
) -> None:
    other = django_user_model.objects.create_user(username="tenant-b")
    RetentionPolicy.objects.create(user=owner, runs_days=3)
    mine, theirs = _run(owner, age_days=5), _run(other, age_days=5)
    job = Job.objects.create(owner=owner, name="j", workflow="w", input={})
    old_occurrence = _history(None, timezone.now() - timedelta(days=5), kind="job", job=job)
    new_occurrence = _history(None, timezone.now(), kind="job", job=job)

    assert runs_purge(now=timezone.now()) == 1

    assert not Run.objects.filter(pk=mine.pk).exists() and Run.objects.filter(pk=theirs.pk).exists()
    assert list(TaskExecutionHistory.objects.filter(job=job).values_list("pk", flat=True)) == [
        new_occurrence.pk
    ]
    assert old_occurrence.pk != new_occurrence.pk


def test_history_keys__hold_the_partition_key_and_the_owner() -> None:
    """The catalog: primary and unique keys of the partitioned history tables (Citus needs the
    distribution column, the owner, in each; a partitioned table needs its partition key)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype IN ('p', 'u') AND conrelid IN ('scheduler_taskexecutionhistory'::regclass,"
            " 'scheduler_runevent'::regclass, 'ops_operatoraction'::regclass) ORDER BY 1, 2"
        )
        keys = cursor.fetchall()
        cursor.execute(
            "SELECT relname, pg_get_partkeydef(oid) FROM pg_class WHERE relkind = 'p' AND relname IN"
            " ('scheduler_taskexecutionhistory', 'scheduler_runevent', 'ops_operatoraction') ORDER BY 1"
        )
        partitioned = cursor.fetchall()
    assert keys == [
        ("ops_operatoraction", "ops_operatoraction_pkey", "PRIMARY KEY (id, created_at)"),
        ("scheduler_runevent", "runevent_event_id_unique", "UNIQUE (event_id, created_at, owner_id)"),
        ("scheduler_runevent", "scheduler_runevent_pkey", "PRIMARY KEY (id, created_at, owner_id)"),
        (
            "scheduler_taskexecutionhistory",
            "scheduler_taskexecutionhistory_pkey",
            "PRIMARY KEY (id, started_at, owner_id)",
        ),
    ]
    assert partitioned == [
        ("ops_operatoraction", "RANGE (created_at)"),
        ("scheduler_runevent", "RANGE (created_at)"),
        ("scheduler_taskexecutionhistory", "RANGE (started_at)"),
    ]


def test_owner__filled_from_the_run_or_the_job(owner: Any) -> None:
    run = Run.objects.create(workflow="w", input={}, owner=owner)
    unowned = Run.objects.create(workflow="w", input={})
    job = Job.objects.create(owner=owner, name="j", workflow="w", input={})
    rows = [
        _history(run, timezone.now()).pk,
        _history(None, timezone.now(), kind="job", job=job).pk,
        _history(unowned, timezone.now()).pk,
    ]
    event = RunEvent.objects.create(run=run, type="started")

    owners = dict(TaskExecutionHistory.objects.filter(pk__in=rows).values_list("pk", "owner_id"))
    assert [owners[pk] for pk in rows] == [owner.pk, owner.pk, 0]
    assert RunEvent.objects.get(pk=event.pk).owner_id == owner.pk

"""Issue 29: the statements that read history read only their window's partitions (plan tests
on EXPLAIN of the real statements): the report's groups, the alert rules' service failure rate."""

from __future__ import annotations

from datetime import UTC, timedelta
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from alerting.failure_conditions import SERVICE_FAILURE_RATE_SQL
from reports.selectors import statements
from sastools.plans import partitions_read
from scheduler.partitions import HISTORY, partition_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def month_of_partitions() -> Any:
    today = timezone.now().astimezone(UTC).date()
    for days_ago in range(30):
        partition_ensure(HISTORY, today - timedelta(days=days_ago))
    return today


def _explain(statement: str, params: dict[str, Any]) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + statement, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _days(today: Any, first: int, last: int) -> set[str]:
    return {f"{HISTORY.table}_p{today - timedelta(days=k):%Y%m%d}" for k in range(first, last + 1)}


def test_plan__a_weeks_report__reads_the_partitions_from_its_start(
    month_of_partitions: Any, admin_user: Any
) -> None:
    today = month_of_partitions
    start = timezone.now() - timedelta(days=7)
    params = {
        "owner": admin_user.pk,
        "start": start,
        "end": timezone.now(),
        "now": timezone.now(),
        "tz": "UTC",
    }

    read = partitions_read(_explain(statements()["report_groups"], params), HISTORY.table)

    assert _days(today, 0, 7) <= read
    assert not read & _days(today, 8, 29), sorted(read)


def test_plan__service_failure_rate__reads_only_its_window(month_of_partitions: Any) -> None:
    today = month_of_partitions
    params = {
        "rule_ids": [1],
        "windows": [timedelta(hours=1)],
        "targets": [""],
        "min_runs": [1],
        "thresholds": [0.5],
        "widest": timedelta(hours=1),
    }

    plan = _explain(SERVICE_FAILURE_RATE_SQL, params)
    read = partitions_read(plan, HISTORY.table)

    # statement_timestamp() is known when the executor starts: the older partitions are pruned
    # there ("Subplans Removed"), not at plan time.
    assert read <= _days(today, 0, 1) | {HISTORY.default} | _ahead(today), plan
    assert not read & _days(today, 2, 29), plan


def _ahead(today: Any) -> set[str]:
    return {f"{HISTORY.table}_p{today + timedelta(days=k):%Y%m%d}" for k in range(1, 15)}

"""The operator services' bulk search is index-backed (issue 21: "every step that failed for this
reason in this window"): on a table of many steps, few in Error, its EXPLAIN is a range scan of
step_error_finished_idx - the planner's own choice, sequential scans allowed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from ops.bulk import steps_failed_matching, steps_failed_matching_queryset

pytestmark = pytest.mark.django_db

# 40,000 steps over 30 days, one in 50 in Error (half of those with the outage's error text):
# the shape of bench/alerts.py's table, small enough for a test (about a second).
FILL_SQL = """
INSERT INTO scheduler_run (id, workflow, input, priority, state, cancel_requested, correlation_id, error,
                           created_at, updated_at)
SELECT md5('op-run' || g)::uuid, 'w', '{}'::jsonb, 0,
       CASE WHEN g % 50 = 0 THEN 'compensated' ELSE 'completed' END, false, '', '', now(), now()
FROM generate_series(1, 40000) AS g;
INSERT INTO scheduler_step (run_id, name, kind, seq, operation, process_state, failure_count, not_before,
                            idempotency_key, timeout, max_failures, backoff_base, backoff_max, priority,
                            attempts, last_error, error_permanent, created_at, updated_at, finished_at)
SELECT md5('op-run' || g)::uuid, 'charge', 'forward', 0, 'agents.payment.call',
       CASE WHEN g % 50 = 0 THEN 'error' ELSE 'processed' END, 0, now(), 'op:' || g,
       interval '30 seconds', 3, 1.0, 60.0, 0, 1,
       CASE WHEN g % 100 = 0 THEN 'payment service unavailable' WHEN g % 50 = 0 THEN 'card declined'
            ELSE '' END,
       false, now(), now(), now() - (g::float / 40000) * interval '30 days'
FROM generate_series(1, 40000) AS g;
ANALYZE scheduler_run;
ANALYZE scheduler_step;
"""


def test_bulk_search__many_steps_few_in_error__range_scan_of_the_error_index() -> None:
    with connection.cursor() as cursor:
        cursor.execute(FILL_SQL)
    now = timezone.now()
    since, until = now - timedelta(hours=6), now + timedelta(minutes=1)
    found = steps_failed_matching(reason="Service Unavailable", since=since, until=until)
    # Six hours of thirty days: 1/120 of the 400 outage steps (the case-insensitive match).
    assert 1 <= len(found) <= 10
    assert all("service unavailable" in s.last_error and s.process_state == "error" for s in found)

    sql, params = steps_failed_matching_queryset(
        reason="service unavailable", since=since, until=until
    ).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "step_error_finished_idx" in plan, plan
    assert "Seq Scan on scheduler_step" not in plan, plan

"""bench/jobs.py writes its 100,000 jobs in bulk instead of through `job_create`, and states its
schedule mix in bench/README.md. These pin both claims (no timing: the bench is never a test)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import jobs as bench_jobs


def test_the_schedule_mix_is_the_stated_one() -> None:
    scheds = bench_jobs.schedule_mix(100_000)
    assert sum(s.count for s in scheds) == 100_000
    by_kind = {kind: sum(s.count for s in scheds if s.kind == kind) for kind in bench_jobs.MIX}
    assert by_kind == {"every minute": 2_000, "every 5 minutes": 8_000, "hourly": 40_000, "daily": 50_000}
    for kind in bench_jobs.MIX:
        assert {s.tz for s in scheds if s.kind == kind} == set(bench_jobs.ZONES)
    assert len({(s.cron, s.tz) for s in scheds}) == len(scheds)


@pytest.mark.django_db
def test_bulk_written_jobs_are_the_rows_job_create_writes(django_user_model: Any, settings: Any) -> None:
    from scheduler.models import Job, ScheduledJob

    # 300 jobs of one owner, as the bench writes them (bench_environment turns the quotas off).
    settings.SAS_QUOTAS = {**settings.SAS_QUOTAS, "ACTIVE_JOBS": 0}
    from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

    register_engine_workflow()
    owner = django_user_model.objects.create(username="jobsbench-test")
    scheds = bench_jobs.schedule_mix(300)
    now = bench_jobs.db_now()
    bench_jobs.fill_jobs(scheds, [owner.id], after=now, workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT)
    assert Job.objects.count() == ScheduledJob.objects.count() == 300
    assert not ScheduledJob.objects.filter(next_execution_at__lte=now).exists()
    # (A minute boundary between the bulk write and job_create is allowed for: job_create then
    # arms the following occurrence, and check_fill compares with that one.)
    verdict = bench_jobs.check_fill(scheds, owner.id)
    assert verdict.startswith("same as job_create's"), verdict

"""`manage.py demo_setup` seeds recurring demo jobs of the order workflow, once."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from scheduler.models import Job, ScheduledJob

pytestmark = pytest.mark.django_db


def test_demo_setup__recurring_order_jobs_seeded_once_each_with_its_next_occurrence():
    call_command("demo_setup", stdout=io.StringIO())
    out = io.StringIO()
    call_command("demo_setup", stdout=out)

    jobs = Job.objects.filter(owner__username="admin", name__startswith="demo: ")
    assert jobs.count() == 3 and all(j.is_recurring and j.workflow == "order_fulfilment" for j in jobs)
    assert ScheduledJob.objects.filter(job__in=jobs, kind="next").count() == 3
    assert "demo jobs in place" in out.getvalue()

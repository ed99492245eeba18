"""`manage.py demo_setup` seeds recurring demo jobs of each kind a job can run, once - in demo
mode only (issue 19: never a known admin login by default)."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from scheduler.models import Job, ScheduledJob

pytestmark = pytest.mark.django_db


def test_demo_setup__outside_demo_mode__refused_and_no_user_created(settings: Any) -> None:
    settings.SAS_DEMO = False
    with pytest.raises(CommandError, match=r"demo mode \(SAS_DEMO=1"):
        call_command("demo_setup", stdout=io.StringIO())
    assert not get_user_model().objects.filter(username="admin").exists()
    assert not Job.objects.exists()


def test_demo_setup__recurring_jobs_of_each_kind_seeded_once_each_with_its_next_occurrence(
    settings: Any,
) -> None:
    settings.SAS_DEMO = True
    call_command("demo_setup", stdout=io.StringIO())
    out = io.StringIO()
    call_command("demo_setup", stdout=out)

    jobs = Job.objects.filter(owner__username="admin", name__startswith="demo: ")
    assert jobs.count() == 6 and all(j.is_recurring for j in jobs)
    assert sorted({j.workflow for j in jobs}) == [
        "catalogue.reprice",
        "http.call",
        "order_fulfilment",
        "task:webhooks.purge_deliveries",
    ]
    assert ScheduledJob.objects.filter(job__in=jobs, kind="next").count() == 6
    assert "demo jobs in place" in out.getvalue()

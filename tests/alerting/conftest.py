"""Fixtures for the alerting tests: rows that make a rule's condition true, and a clean slate of
rules (the shipped ones are removed inside the test's transaction, so each test sees only the
rule it is about)."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from alerting.models import AlertRule
from scheduler.models import Job, Run, Step
from scheduler.services import job_create

_n = itertools.count()

ORDER_INPUT = {"items": [{"sku": "SKU-1", "quantity": 1}], "amount": "5.00", "currency": "EUR"}


@pytest.fixture(autouse=True)
def no_startup_grace(settings: Any) -> None:
    """The evaluator in this (long-lived) test process is past its start-up grace, whatever the
    order the tests run in; tests/alerting/test_startup_grace.py sets it to test it."""
    settings.SAS_ALERT_STARTUP_GRACE = 0


@pytest.fixture
def no_rules(db: Any) -> None:
    AlertRule.objects.all().delete()


def rule(kind: str, **fields: Any) -> AlertRule:
    defaults: dict[str, Any] = {
        "name": f"{kind}-{next(_n)}",
        "kind": kind,
        "cooldown": timedelta(0),
        "notify_email": False,
    }
    return AlertRule.objects.create(**{**defaults, **fields})


def user(name: str) -> Any:
    """A new user named after `name` (suffixed: live tests elsewhere commit an "alice" that a
    later test in the same database would collide with)."""
    return get_user_model().objects.create_user(f"{name}-{next(_n)}", f"{name}@example.com", "x")


def job(owner: Any, **fields: Any) -> Job:
    defaults: dict[str, Any] = {
        "name": f"job-{next(_n)}",
        "workflow": "order_fulfilment",
        "input": ORDER_INPUT,
        "cron": "30 2 * * *",
        "timezone_name": "UTC",
    }
    return job_create(by_staff=False, owner_id=owner.pk, **{**defaults, **fields})


def run(
    *, workflow: str = "wf", state: str = "compensated", ago: timedelta = timedelta(0), **fields: Any
) -> Run:
    if fields.get("job") is not None:
        # A job's run is its owner's (the dispatcher writes it so; the run's foreign key to its
        # job holds the owner, decision record 55).
        fields.setdefault("owner_id", fields["job"].owner_id)
    created = Run.objects.create(workflow=workflow, state=state, **fields)
    Run.objects.filter(pk=created.pk).update(created_at=timezone.now() - ago)
    return created


def error_step(r: Run, *, name: str = "charge_payment", ago: timedelta = timedelta(0)) -> Step:
    return Step.objects.create(
        run=r,
        name=name,
        seq=0,
        operation="agents.payment.charge",
        idempotency_key=str(uuid.uuid4()),
        process_state="error",
        finished_at=timezone.now() - ago,
    )

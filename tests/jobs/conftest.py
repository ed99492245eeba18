"""Fixtures for the job API, pages and admin: users with tokens and signed-in clients, a job
payload for the order workflow (a workflow every test database has), and a count of every row a
job writes, to prove that a refused request wrote nothing."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.test import Client

from scheduler.models import Job, Run, ScheduledJob, TaskExecutionHistory
from scheduler.workflows import StepDef, Workflow, WorkflowInputError, get_workflow, register

from ..orders.conftest import _generous_submit_rate, api, other_api

# The orders' API clients, over this folder's `user` and `other_user` (no password: fast).
__all__ = ["_generous_submit_rate", "api", "other_api"]

_names = itertools.count()

ORDER_INPUT = {"items": [{"sku": "SKU-1", "quantity": 1}], "amount": "5.00", "currency": "EUR"}
WORKFLOW = "order_fulfilment"


def job_body(**overrides: Any) -> dict[str, Any]:
    """A valid recurring job for the API."""
    return {
        "name": "nightly",
        "workflow": WORKFLOW,
        "input": ORDER_INPUT,
        "cron": "30 2 * * *",
        "timezone": "Europe/Berlin",
        **overrides,
    }


def row_counts() -> tuple[int, int, int, int]:
    """Jobs, scheduled rows, runs and history rows: what a refused request must not change."""
    return (
        Job.objects.count(),
        ScheduledJob.objects.count(),
        Run.objects.count(),
        TaskExecutionHistory.objects.count(),
    )


# The bad inputs: (API body changes, the field whose error is expected).
BAD_INPUTS = [
    pytest.param({"cron": "61 * * * *"}, "cron", id="minute-61"),
    pytest.param({"cron": "*/0 * * * *"}, "cron", id="step-zero"),
    pytest.param({"cron": "0 0 * * * *"}, "cron", id="six-fields"),
    pytest.param({"cron": "", "recurring": True}, "cron", id="recurring-without-cron"),
    pytest.param({"timezone": "Mars/Olympus_Mons"}, "timezone", id="unknown-zone"),
    pytest.param(
        {"start_at": "2031-01-02T00:00:00Z", "end_at": "2031-01-01T00:00:00Z"},
        "end_at",
        id="end-before-start",
    ),
    pytest.param({"max_retry": -1}, "max_retry", id="negative-retries"),
    pytest.param({"input": {**ORDER_INPUT, "items": []}}, "input", id="workflow-input"),
]


def make_user(prefix: str) -> Any:
    """A user without a password (hashing one costs a third of a second; the tests sign in with
    force_login or a token)."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=f"{prefix}{next(_names)}")


@pytest.fixture
def user(db: None) -> Any:
    return make_user("jobber")


@pytest.fixture
def other_user(db: None) -> Any:
    return make_user("stranger")


@pytest.fixture
def web(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


# A workflow this app has never heard of, registered the way any app registers one (schedulable
# tasks and HTTP calls do the same): the form and the API must offer it (to customers too: it
# says it is customer-schedulable) and show its own input errors per key, with no code of their
# own for it.
PROBE_WORKFLOW = "jobsui_probe"


def _probe_validate(data: Any) -> dict[str, Any]:
    errors: dict[str, list[str]] = {}
    unknown = sorted(set(data) - {"url", "method"})
    if unknown:
        errors["non_field_errors"] = [f"unknown field(s): {', '.join(unknown)}"]
    if not str(data.get("url", "")).startswith("https://"):
        errors["url"] = ["must be an https URL"]
    if errors:
        raise WorkflowInputError(errors)
    return {"url": data["url"], "method": data.get("method", "GET")}


def probe_workflow() -> str:
    try:
        get_workflow(PROBE_WORKFLOW)
    except WorkflowInputError:
        register(
            Workflow(
                name=PROBE_WORKFLOW,
                validate=_probe_validate,
                # Offered to customers too (the tests' users are not staff).
                customer_schedulable=True,
                steps=[StepDef(name="call", operation="agents.jobsui_probe.call")],
            )
        )
    return PROBE_WORKFLOW

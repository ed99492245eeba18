"""The shipped operator rules watch the platform (issue 27): "Job failing repeatedly", "Job
failure rate" and "Workflow failure rate" paged operators for any customer's job whose own
endpoint failed. Now a customer's failing job pages no operator by default - its runs go to the
customer's own rules - while a staff account's job, and a customer's job an operator set a rule
on, still do. Real PostgreSQL, the evaluator in-process, the rules as shipped."""

from __future__ import annotations

from datetime import timedelta

import pytest

from alerting.default_rules import DEFAULT_RULES
from alerting.models import Alert, AlertRule
from alerting.services import alert_rules_evaluate
from scheduler.models import Job

from .conftest import job, rule, run, user

pytestmark = pytest.mark.usefixtures("no_rules")

WATCHING_JOBS = ("Workflow failure rate", "Job failure rate", "Job failing repeatedly")


def shipped() -> list[AlertRule]:
    return [
        AlertRule.objects.create(name=name, kind=kind, **fields)
        for name, kind, fields in DEFAULT_RULES
        if name in WATCHING_JOBS
    ]


def failing(j: Job, *, n: int = 10) -> None:
    for i in range(n):
        run(workflow=j.workflow, state="compensated", job=j, ago=timedelta(seconds=60 - i))


def test_customer_job_failing__shipped_operator_rules__page_no_operator() -> None:
    rules = shipped()
    customer_job = job(user("customer"))
    failing(customer_job)
    assert alert_rules_evaluate().ran
    assert not Alert.objects.filter(rule__in=rules).exists(), list(
        Alert.objects.values_list("rule__name", "message")
    )


def test_staff_job_failing__shipped_operator_rules__fire() -> None:
    rules = shipped()
    staff = user("staff")
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    staff_job = job(staff)
    failing(staff_job)
    assert alert_rules_evaluate().ran
    alerted = set(Alert.objects.filter(rule__in=rules).values_list("rule__name", flat=True))
    assert alerted == set(WATCHING_JOBS)


def test_customer_job__an_operator_rule_on_that_job__fires() -> None:
    customer_job = job(user("customer"))
    watched = rule("job_consecutive_failures", job=customer_job, threshold=3)
    failing(customer_job, n=3)
    assert alert_rules_evaluate().ran
    assert Alert.objects.get(rule=watched).subject == str(customer_job.pk)


def test_customer_rule_on_own_job__still_fires() -> None:
    owner = user("customer")
    own_job = job(owner)
    mine = rule("job_failure_rate", job=own_job, owner=owner, threshold=0.5, min_runs=3)
    failing(own_job, n=3)
    assert alert_rules_evaluate().ran
    assert Alert.objects.get(rule=mine).state == "firing"

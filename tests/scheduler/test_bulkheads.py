"""Bulkheads' slots (issue 26, docs/operating/fairness.md): a claim sends an agent queue no more steps than
it has slots, an owner no more than its share of them, and asks the same of a step claimed by
id (a submit's, a reply's next step). Database tier; the live noisy neighbour is
tests/e2e/test_noisy_neighbour_live.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction

from agents.http_call import HTTP_CALL_OPERATION, HTTP_CALL_WORKFLOW
from agents.routing import route_agent_task
from sasproject.settings.env import env_slots
from sasproject.workflow_apps import workflow_app_queue
from sastools.harness import REPO, procfile_commands
from scheduler import transitions
from scheduler.bulkheads import bulkhead_limits, owner_slots
from scheduler.models import Step
from scheduler.services import RunSpec, run_submit, runs_submit_many, step_claim_due
from scheduler.workflows import get_workflow, registered_workflows
from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

SLOTS = 4  # agent.http's slots here; an owner's share of them is 3 (0.75)


@pytest.fixture
def http_slots(settings: Any) -> None:
    settings.SAS = {
        **settings.SAS,
        "BULKHEAD_SLOTS": {**settings.SAS["BULKHEAD_SLOTS"], "agent.http": SLOTS},
        "BULKHEAD_OWNER_SHARE": 0.75,
    }


def _url() -> str:
    return f"{os.environ['SIMULATOR_URL']}/echo"


def _calls(owner: Any, n: int) -> list[Any]:
    definition = get_workflow(HTTP_CALL_WORKFLOW)
    body = definition.validate({"method": "POST", "url": _url(), "body": {}})
    spec = RunSpec(definition=definition, input=body, owner_id=owner.id)
    return runs_submit_many([spec] * n, kick=False)


def _processing(owner: Any | None = None) -> int:
    steps = Step.objects.filter(operation=HTTP_CALL_OPERATION, process_state=Step.State.PROCESSING)
    return steps.filter(owner_id=owner.id).count() if owner else steps.count()


def _claim(limit: int = 100) -> list[Any]:
    with transaction.atomic():
        return step_claim_due(instance="test", limit=limit)


def _owners(django_user_model: Any) -> tuple[Any, Any]:
    return (
        django_user_model.objects.create(username="bulkhead-a"),
        django_user_model.objects.create(username="bulkhead-b"),
    )


def test_claim__one_owners_flood__takes_its_share_of_the_slots_and_no_more(http_slots, django_user_model):
    _, b = _owners(django_user_model)
    _calls(b, 20)

    claims = _claim()
    again = _claim()

    assert len(claims) == owner_slots(slots=SLOTS, share=0.75) == 3 and again == []
    assert _processing(b) == 3


def test_claim__flood_at_its_share__another_owner_gets_the_slot_left_and_then_nobody(
    http_slots, django_user_model
):
    a, b = _owners(django_user_model)
    _calls(b, 20)
    _claim()
    _calls(a, 5)

    claims = _claim()

    assert [c.operation for c in claims] == [HTTP_CALL_OPERATION]
    assert _processing(a) == 1 and _processing() == SLOTS
    assert _claim() == []  # the queue is full: A's four others and B's seventeen wait, Pending


def test_reply__frees_a_slot__one_more_goes_to_the_owner_with_fewer_in_flight_within_the_slots(
    http_slots, django_user_model
):
    a, b = _owners(django_user_model)
    _calls(b, 20)
    (first, *_) = _claim()
    _calls(a, 5)
    _claim()  # A's one; the queue is full
    assert _processing() == SLOTS

    with transaction.atomic():
        done = transitions.step_succeed(
            step_id=first.step_id,
            lease=first.lease,
            result={},
            instance="t",
            claim_next=True,
            observed_ok=True,
        )

    # B had 3 (now 2) and A 1: the freed slot goes to A, and the queue is full again.
    assert [c.step_id for c in done.claims] and _processing(a) == 2 and _processing(b) == 2
    assert _processing() == SLOTS


def test_submit__claim_on_submit__only_into_a_free_slot(http_slots, django_user_model, settings):
    a, b = _owners(django_user_model)
    _calls(b, 20)
    _claim()
    _calls(a, 1)
    _claim()
    assert _processing() == SLOTS
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": True}
    definition = get_workflow(HTTP_CALL_WORKFLOW)

    run = run_submit(
        workflow=HTTP_CALL_WORKFLOW,
        input=definition.validate({"method": "POST", "url": _url(), "body": {}}),
        owner_id=a.id,
        kick=False,
    )

    assert run.steps.get().process_state == Step.State.PENDING and _processing() == SLOTS


def test_claim__other_bulkheads__are_not_held_by_a_full_one(http_slots, django_user_model):
    _, b = _owners(django_user_model)
    _calls(b, 20)
    _claim()
    other = run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=b.id, kick=False)

    claims = _claim()

    assert [c.run_id for c in claims] == [str(other.id)]


def test_bulkhead_sql__is_the_routers_queue__for_every_registered_operation():
    operations = {step.operation for name in registered_workflows() for step in get_workflow(name).steps}
    assert HTTP_CALL_OPERATION in operations

    with connection.cursor() as cursor:
        for operation in [*sorted(operations), "agents.x.y.z", "bench.noop"]:
            cursor.execute("SELECT sas_bulkhead(%s)", [operation])
            route = route_agent_task(operation, (), {}, {})
            assert cursor.fetchone()[0] == (route["queue"] if route else operation), operation


def test_default_slots__are_the_procfile_workers_threads():
    """One fact, two places: each agent worker's `-c` in the Procfile (and compose) is its
    queues' slots by default; a worker serving several queues gives each of them its threads."""
    from django.conf import settings

    defaults = env_slots("SAS_TEST_UNSET_VARIABLE", settings.SAS["BULKHEAD_SLOTS"])
    compose = (REPO / "docker" / "compose.yml").read_text()
    seen: dict[str, int] = {}
    for command in [*procfile_commands().values(), *re.findall(r"command: (celery .*)", compose)]:
        queues = re.search(r"-Q (\S+)", command)
        threads = re.search(r" -c (\d+)", command)
        if queues and threads:
            for queue in queues.group(1).split(","):
                if queue.startswith("agent."):
                    seen[queue] = int(threads.group(1))
    # The agents-apps worker serves the workflow apps' queues, found at its start (issue 31).
    apps_threads = re.search(r" -c (\d+)", procfile_commands()["agents-apps"])
    assert apps_threads
    for app in settings.SAS_WORKFLOW_APPS:
        seen[workflow_app_queue(app)] = int(apps_threads.group(1))
    assert seen == {queue: n for queue, n in defaults.items()}, (seen, defaults)


@pytest.mark.parametrize("value", ["agent.http", "agent.http=0", "agent.http=x", "=8", "agent.http=-1"])
def test_slots_setting__bad_value__is_refused_with_its_name(value, monkeypatch):
    monkeypatch.setenv("SAS_BULKHEAD_SLOTS", value)

    with pytest.raises(ImproperlyConfigured, match="SAS_BULKHEAD_SLOTS"):
        env_slots("SAS_BULKHEAD_SLOTS", {})


def test_slots_setting__listed_queues__override_the_defaults(monkeypatch):
    monkeypatch.setenv("SAS_BULKHEAD_SLOTS", " agent.http=16 , agent.new=3")

    assert env_slots("SAS_BULKHEAD_SLOTS", {"agent.http": 8, "agent.tasks": 2}) == {
        "agent.http": 16,
        "agent.tasks": 2,
        "agent.new": 3,
    }


def test_limits__owner_share__rounds_up_and_keeps_one(settings):
    settings.SAS = {
        **settings.SAS,
        "BULKHEAD_SLOTS": {"agent.http": 8, "agent.tasks": 2, "agent.one": 1},
        "BULKHEAD_OWNER_SHARE": 0.75,
        "MAX_IN_FLIGHT_PER_OPERATION": 50,
    }

    assert bulkhead_limits() == (
        '{"default": [50, 38], "slots": {"agent.http": [8, 6], "agent.one": [1, 1], "agent.tasks": [2, 2]}}'
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SAS_BULKHEAD_OWNER_SHARE", "0"),
        ("SAS_BULKHEAD_OWNER_SHARE", "1.5"),
        ("SAS_BULKHEAD_SLOTS", "agent.http=0"),
    ],
)
def test_settings__bad_bulkhead_setting__refused_at_start_up_naming_it(name, value):
    env = {**os.environ, name: value, "DJANGO_SETTINGS_MODULE": "sasproject.settings"}

    done = subprocess.run(
        [sys.executable, "-c", "import sasproject.settings"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
    )

    assert done.returncode != 0 and "ImproperlyConfigured" in done.stderr and name in done.stderr, done.stderr

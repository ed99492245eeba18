"""The periodic tasks' admin (ops/beat_admin.py, issue 26): an "Operators" member edits the
schedule only. The stock admin let `change_periodictask` rewrite a task's `task`, `kwargs`,
`queue` and `headers`, so beat sent whatever they typed to any agent's queue every tick.
Through Django's test client against the real database."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django_celery_beat.models import IntervalSchedule, PeriodicTask

from tests.roles import ROLES, client_of, staff_in

pytestmark = pytest.mark.django_db

TASKS = "/admin/django_celery_beat/periodictask/"

STORED = {
    "name": "sas: test sweep",
    "task": "supervisor.sweep",
    "args": "[]",
    "kwargs": "{}",
    "queue": None,
    "exchange": None,
    "routing_key": None,
    "priority": None,
    "headers": "{}",
    "description": "",
}
# What an attacker holding change_periodictask would write: a refund, on the agents' queue.
FORGED = {
    "task": "agents.payment.refund",
    "kwargs": json.dumps({"step_id": 1, "lease": "x", "payload": {"charge_id": "ch_victim"}}),
    "queue": "agent.payment",
    "headers": json.dumps({"sas_sent_at": "0"}),
}


@pytest.fixture
def periodic() -> PeriodicTask:
    every, _ = IntervalSchedule.objects.get_or_create(every=10, period=IntervalSchedule.SECONDS)
    return PeriodicTask.objects.create(interval=every, **STORED)


def _schedule_form(*, every: IntervalSchedule, enabled: bool) -> dict[str, Any]:
    """The schedule-only form as the admin renders it to an operator, filled in."""
    data: dict[str, Any] = {
        "interval": str(every.pk),
        "crontab": "",
        "solar": "",
        "clocked": "",
        "start_time_0": "",
        "start_time_1": "",
        "expires_0": "",
        "expires_1": "",
        "expire_seconds": "",
        "_save": "Save",
    }
    if enabled:
        data["enabled"] = "on"
    return data


def _what(task: PeriodicTask) -> dict[str, Any]:
    task.refresh_from_db()
    return {name: getattr(task, name) for name in STORED}


def test_operator__edits_the_schedule__saved_what_the_task_does_unchanged(periodic: PeriodicTask) -> None:
    operator = client_of(staff_in("beat-op", ROLES["operator"]))
    minute, _ = IntervalSchedule.objects.get_or_create(every=60, period=IntervalSchedule.SECONDS)

    page = operator.get(f"{TASKS}{periodic.pk}/change/")
    response = operator.post(f"{TASKS}{periodic.pk}/change/", _schedule_form(every=minute, enabled=False))

    assert page.status_code == 200
    form = page.context["adminform"].form
    assert set(form.fields) == {
        "enabled",
        "interval",
        "crontab",
        "solar",
        "clocked",
        "start_time",
        "one_off",
        "expires",
        "expire_seconds",
    }
    assert response.status_code == 302, response.context["adminform"].form.errors
    periodic.refresh_from_db()
    assert periodic.interval_id == minute.pk and periodic.enabled is False
    assert _what(periodic) == STORED


@pytest.mark.parametrize("field", sorted(FORGED))
def test_operator__post_changing_what_the_task_does__refused_nothing_saved(
    periodic: PeriodicTask, field: str
) -> None:
    operator = client_of(staff_in(f"beat-forger-{field}", ROLES["operator"]))
    minute, _ = IntervalSchedule.objects.get_or_create(every=60, period=IntervalSchedule.SECONDS)
    data = {**_schedule_form(every=minute, enabled=False), field: FORGED[field]}

    response = operator.post(f"{TASKS}{periodic.pk}/change/", data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.non_field_errors()
    assert len(errors) == 1 and errors[0].startswith("Only the schedule can be changed here")
    assert f"not saved: {field}." in errors[0]
    periodic.refresh_from_db()
    assert periodic.interval_id != minute.pk and periodic.enabled is True
    assert _what(periodic) == STORED


def test_operator__cannot_add_a_periodic_task(periodic: PeriodicTask) -> None:
    operator = staff_in("beat-adder", ROLES["operator"])
    operator.user_permissions.add(*_beat_permissions("add_periodictask"))
    client = client_of(get_user_model().objects.get(pk=operator.pk))
    before = PeriodicTask.objects.count()

    page = client.get(f"{TASKS}add/")
    response = client.post(
        f"{TASKS}add/", {"name": "evil", "task": FORGED["task"], "interval": str(periodic.interval_id)}
    )

    assert page.status_code == 403 and response.status_code == 403
    assert PeriodicTask.objects.count() == before


def test_read_only__cannot_post_a_change(periodic: PeriodicTask) -> None:
    reader = client_of(staff_in("beat-reader", ROLES["read_only"]))

    assert reader.get(f"{TASKS}{periodic.pk}/change/").status_code == 200
    response = reader.post(
        f"{TASKS}{periodic.pk}/change/", {**_schedule_form(every=periodic.interval, enabled=False)}
    )

    assert response.status_code == 403
    periodic.refresh_from_db()
    assert periodic.enabled is True


def test_superuser__edits_what_the_task_does(periodic: PeriodicTask) -> None:
    root = Client()
    root.force_login(get_user_model().objects.create_superuser("beat-root", "root@example.com", None))
    data = {
        **_schedule_form(every=periodic.interval, enabled=True),
        "name": periodic.name,
        "regtask": "",
        "task": "alerting.evaluate",
        "description": "",
        "args": "[]",
        "kwargs": '{"a": 1}',
        "queue": "",
        "exchange": "",
        "routing_key": "",
        "priority": "",
        "headers": "{}",
    }

    response = root.post(f"{TASKS}{periodic.pk}/change/", data)

    assert response.status_code == 302, response.context["adminform"].form.errors
    periodic.refresh_from_db()
    assert periodic.task == "alerting.evaluate" and json.loads(periodic.kwargs) == {"a": 1}


def _beat_permissions(*codenames: str) -> list[Any]:
    from django.contrib.auth.models import Permission

    return list(
        Permission.objects.filter(content_type__app_label="django_celery_beat", codename__in=codenames)
    )

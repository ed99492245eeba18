"""The platform's cap on enabled alert rules (issue 26, item 7): the evaluator reads at most
SAS_ALERT_MAX_RULES of them a tick, and a customer's rule past it was created and then never
evaluated, silently. Now no rule is enabled past it - a customer's create (API, page) and an
operator's add, edit and list tick are refused naming the limit, nothing written, and two
creates at the limit at once let one through (real threads, real transactions). Rules over it
from before (the setting lowered) are logged and counted by the evaluator, not skipped in
silence."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from alerting.customer import AlertRuleInputError, CustomerRuleInput, customer_rule_create
from alerting.models import AlertRule
from alerting.rules import RULE_CAP_LOCK
from alerting.services import alert_rules_evaluate
from ops.metrics import EngineCollector

from ..orders.conftest import token_client
from .conftest import job, rule, user
from .test_names_and_secret import ADMIN_RULE

CAP = 3
LIMIT_TEXT = "at most 3 alert rules can be enabled"


def _fill(n: int, **fields: Any) -> list[AlertRule]:
    return [rule("run_needs_operator", **fields) for _ in range(n)]


def _body(job_id: int, name: str = "") -> dict[str, Any]:
    return {"job": job_id, "kind": "job_consecutive_failures", "threshold": 3, "name": name}


@pytest.mark.usefixtures("no_rules")
def test_api_create__enabled_rules_at_the_cap__400_naming_the_limit_nothing_written(settings: Any) -> None:
    settings.SAS_ALERT_MAX_RULES = CAP
    alice = user("alice")
    j = job(alice)
    _fill(CAP - 1)
    client = token_client(alice)
    assert client.post("/api/alert-rules/", _body(j.pk, "last one in"), format="json").status_code == 201

    response = client.post("/api/alert-rules/", _body(j.pk, "one too many"), format="json")

    assert response.status_code == 400
    assert LIMIT_TEXT in response.json()["job"][0] and "SAS_ALERT_MAX_RULES" in response.json()["job"][0]
    assert AlertRule.objects.filter(enabled=True).count() == CAP
    assert not AlertRule.objects.filter(name="one too many").exists()


@pytest.mark.usefixtures("no_rules")
def test_api_create__disabled_rules_do_not_count(settings: Any) -> None:
    settings.SAS_ALERT_MAX_RULES = CAP
    alice = user("alice")
    _fill(CAP, enabled=False)
    response = token_client(alice).post("/api/alert-rules/", _body(job(alice).pk), format="json")
    assert response.status_code == 201, response.json()


@pytest.mark.usefixtures("no_rules")
def test_page_create__at_the_cap__form_error_naming_the_limit_nothing_written(settings: Any) -> None:
    settings.SAS_ALERT_MAX_RULES = CAP
    alice = user("alice")
    j = job(alice)
    _fill(CAP)
    client = Client()
    client.force_login(alice)

    response = client.post(
        reverse("jobs:alert_rule_create", args=[j.pk]),
        {
            "kind": "job_consecutive_failures",
            "threshold": "2",
            "min_runs": "1",
            "window_minutes": "60",
            "notify_email": "on",
        },
    )

    assert response.status_code == 400 and LIMIT_TEXT in response.content.decode()
    assert not AlertRule.objects.filter(owner=alice).exists()


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops-cap", "ops@example.com", None))
    return client


@pytest.mark.usefixtures("no_rules")
def test_admin__add_and_enable_at_the_cap__refused_on_enabled__disabled_add_allowed(
    staff: Client, settings: Any
) -> None:
    settings.SAS_ALERT_MAX_RULES = CAP
    _fill(CAP)
    dormant = rule("run_needs_operator", enabled=False)
    add = reverse("admin:alerting_alertrule_add")

    added = staff.post(add, {**ADMIN_RULE, "name": "one too many"})
    kept_off = staff.post(add, {**{k: v for k, v in ADMIN_RULE.items() if k != "enabled"}, "name": "off"})
    enabled = staff.post(
        reverse("admin:alerting_alertrule_change", args=[dormant.pk]),
        {**ADMIN_RULE, "name": dormant.name},
    )

    assert added.status_code == 200
    assert LIMIT_TEXT in added.context["adminform"].form.errors["enabled"][0]
    assert not AlertRule.objects.filter(name="one too many").exists()
    assert kept_off.status_code == 302 and AlertRule.objects.get(name="off").enabled is False
    assert enabled.status_code == 200 and enabled.context["adminform"].form.errors["enabled"]
    assert AlertRule.objects.get(pk=dormant.pk).enabled is False
    assert AlertRule.objects.filter(enabled=True).count() == CAP


@pytest.mark.usefixtures("no_rules")
def test_admin__an_enabled_rule_at_the_cap__still_edited(staff: Client, settings: Any) -> None:
    settings.SAS_ALERT_MAX_RULES = CAP
    first, *_ = _fill(CAP)
    response = staff.post(
        reverse("admin:alerting_alertrule_change", args=[first.pk]),
        {**ADMIN_RULE, "name": "renamed"},
    )
    assert response.status_code == 302
    assert AlertRule.objects.get(pk=first.pk).name == "renamed"


@pytest.mark.usefixtures("no_rules")
def test_admin_list__ticks_past_the_cap_together__refused_none_enabled(staff: Client, settings: Any) -> None:
    """Each tick alone fits (one slot left); the two together do not."""
    settings.SAS_ALERT_MAX_RULES = CAP
    on = _fill(CAP - 1)
    off = _fill(2, enabled=False)
    rows = sorted([*on, *off], key=lambda r: r.name)  # the list's order (Meta.ordering)
    data: dict[str, Any] = {
        "form-TOTAL_FORMS": str(len(rows)),
        "form-INITIAL_FORMS": str(len(rows)),
        "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000",
        "_save": "Save",
    }
    for i, r in enumerate(rows):
        data[f"form-{i}-id"] = str(r.pk)
        data[f"form-{i}-enabled"] = "on"  # the two disabled ones ticked

    response = staff.post(reverse("admin:alerting_alertrule_changelist"), data)

    assert response.status_code == 200
    assert LIMIT_TEXT in response.content.decode()
    assert set(AlertRule.objects.filter(enabled=True)) == set(on)

    # One of them alone fits.
    data[f"form-{rows.index(off[1])}-enabled"] = ""
    response = staff.post(reverse("admin:alerting_alertrule_changelist"), data)
    assert response.status_code == 302
    assert set(AlertRule.objects.filter(enabled=True)) == {*on, off[0]}


@pytest.mark.usefixtures("no_rules")
def test_evaluator__rules_over_the_cap_from_before__logged_and_counted(settings: Any, caplog: Any) -> None:
    _fill(CAP + 2, window=timedelta(minutes=5))
    settings.SAS_ALERT_MAX_RULES = CAP  # lowered after they were enabled

    with caplog.at_level("ERROR", logger="sas.alerts"):
        tick = alert_rules_evaluate()

    assert tick.ran and tick.rules == CAP and tick.not_evaluated == 2
    assert "2 enabled alert rule(s) over SAS_ALERT_MAX_RULES (3) are not evaluated" in caplog.text
    gauges = {m.name: m for m in EngineCollector()._alerts_and_breakers()}
    assert gauges["sas_alert_rules_not_evaluated"].samples[0].value == 2


# -- at the limit, at once: real threads, each with its own connection and transaction ---------------


@pytest.mark.usefixtures("live_db")  # committed rows (each thread its own connection); emptied after
def test_two_api_creates_at_the_limit_at_once__one_created_one_refused(settings: Any) -> None:
    settings.SAS_ALERT_MAX_RULES = CAP
    AlertRule.objects.all().delete()  # the shipped rules (live_db puts them back)
    _fill(CAP - 1)
    owners = [user("cap-a"), user("cap-b")]  # two customers: no shared user-row lock
    clients: list[APIClient] = [token_client(o) for o in owners]
    bodies = [_body(job(o).pk, f"race {n}") for n, o in enumerate(owners)]
    barrier = threading.Barrier(2)
    statuses: list[int] = []

    def create(n: int) -> None:
        try:
            barrier.wait(timeout=30)
            statuses.append(clients[n].post("/api/alert-rules/", bodies[n], format="json").status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=create, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    assert sorted(statuses) == [201, 400]
    assert AlertRule.objects.filter(enabled=True).count() == CAP


def _waiting_on_the_cap_lock() -> bool:
    """Whether a backend waits for the cap's advisory lock (a bigint key: classid is its high
    32 bits, objid its low 32 bits, objsubid 1)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            " AND classid = %s AND objid = %s AND objsubid = 1",
            [RULE_CAP_LOCK >> 32, RULE_CAP_LOCK & 0xFFFFFFFF],
        )
        (count,) = cursor.fetchone()
    return bool(count)


@pytest.mark.usefixtures("live_db")
def test_create_at_the_limit_while_another_commits__waits_then_refused(settings: Any) -> None:
    """Deterministic interleaving: A has created the last rule the cap allows and not committed;
    B's create must wait for A's transaction (not count the rules without A's), then be refused."""
    from sastools.harness import wait_for

    settings.SAS_ALERT_MAX_RULES = CAP
    AlertRule.objects.all().delete()
    _fill(CAP - 1)
    a, b = user("cap-a"), user("cap-b")
    jobs = {a.pk: job(a).pk, b.pk: job(b).pk}
    a_created, a_release = threading.Event(), threading.Event()
    outcome: dict[str, Any] = {}

    def data(owner: Any) -> CustomerRuleInput:
        return CustomerRuleInput(job_id=jobs[owner.pk], kind="job_consecutive_failures", threshold=3)

    def first() -> None:
        try:
            with transaction.atomic():
                outcome["a"] = customer_rule_create(owner_id=a.pk, data=data(a)).pk
                a_created.set()
                assert a_release.wait(timeout=60)
        finally:
            connection.close()

    def second() -> None:
        try:
            customer_rule_create(owner_id=b.pk, data=data(b))
            outcome["b"] = "created"
        except AlertRuleInputError as refused:
            outcome["b"] = refused.errors
        finally:
            connection.close()

    ta, tb = threading.Thread(target=first), threading.Thread(target=second)
    ta.start()
    try:
        assert a_created.wait(timeout=60)
        tb.start()
        # B either waits on the cap's lock (as it must) or has already finished (no lock).
        wait_for(lambda: "b" in outcome or _waiting_on_the_cap_lock(), timeout=60, what="B to wait or end")
        assert "b" not in outcome, outcome  # still waiting: A has not committed
    finally:
        a_release.set()
        ta.join(timeout=60)
        if tb.ident is not None:  # started
            tb.join(timeout=60)

    assert isinstance(outcome["a"], int)
    assert LIMIT_TEXT in outcome["b"]["job"][0]
    assert AlertRule.objects.filter(enabled=True).count() == CAP
    assert not AlertRule.objects.filter(owner=b).exists()

"""The alert models moved from supervisor to alerting (issue 27) without moving data: migrating a
database of the pre-move state, with a rule, an alert and its affected runs in it, keeps every row
(the tables are renamed, not copied), and the read-only operators' group, which held
`supervisor.view_alert`, can still view alerts - now `alerting.view_alert`, the same permission
row, its content type moved."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client
from django.urls import reverse

from alerting.models import Alert, AlertRule, AlertRun
from ops.roles import READ_ONLY_GROUP
from scheduler.models import Run

BEFORE = [
    ("supervisor", "0009_alertrule_name_and_recipients_checked"),
    ("alerting", "0001_evaluate_periodic_task"),
]


def _migrate(targets: list[tuple[str, str]] | None = None) -> Any:
    """Migrate to `targets` (None: the newest); the project state's apps there."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    plan_to = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(plan_to)
    ContentType.objects.clear_cache()
    return executor.loader.project_state(plan_to).apps


@pytest.fixture
def pre_move(transactional_db: None) -> Iterator[Any]:
    """The database as it was before the move; migrated to the newest again afterwards, whatever
    the test did."""
    try:
        yield _migrate(BEFORE)
    finally:
        _migrate()


def _tables() -> set[str]:
    return set(connection.introspection.table_names())


def test_migrate__alert_rows_of_the_pre_move_state__kept_and_viewable_by_read_only(
    pre_move: Any, django_user_model: Any
) -> None:
    assert {"supervisor_alert", "supervisor_alertrule", "supervisor_alertrun"} <= _tables()
    assert not {"alerting_alert", "alerting_alertrule", "alerting_alertrun"} & _tables()
    view_alert = Permission.objects.get(content_type__app_label="supervisor", codename="view_alert")
    read_only = Group.objects.get(name=READ_ONLY_GROUP)
    assert read_only.permissions.filter(pk=view_alert.pk).exists()

    OldRule = pre_move.get_model("supervisor", "AlertRule")
    OldAlert = pre_move.get_model("supervisor", "Alert")
    OldAlertRun = pre_move.get_model("supervisor", "AlertRun")
    runs = [Run.objects.create(workflow="wf", state="failed") for _ in range(2)]
    rule = OldRule.objects.create(name="moved rule", kind="step_error", threshold=0)
    alert = OldAlert.objects.create(
        rule_id=rule.pk, run_id=runs[0].pk, kind="step_error", subject="charge_payment",
        message="charge_payment: out of attempts", state="firing", key=f"{rule.pk}:charge_payment", count=2,
    )  # fmt: skip
    for r in runs:
        OldAlertRun.objects.create(alert_id=alert.pk, run_id=r.pk)

    _migrate()

    assert not {"supervisor_alert", "supervisor_alertrule", "supervisor_alertrun"} & _tables()
    moved = Alert.objects.select_related("rule").get(pk=alert.pk)
    assert (moved.rule.name, moved.subject, moved.count, moved.state) == (
        "moved rule", "charge_payment", 2, "firing",
    )  # fmt: skip
    assert AlertRule.objects.get(pk=rule.pk).kind == "step_error"
    assert set(AlertRun.objects.filter(alert=moved).values_list("run_id", flat=True)) == {r.pk for r in runs}
    # The ids go on from where they were (the sequences were renamed with their tables).
    assert AlertRule.objects.create(name="after the move", kind="steps_overdue").pk > rule.pk

    # The same permission row, now alerting's; the group still holds it, and a member sees alerts.
    view_alert.refresh_from_db()
    assert (view_alert.content_type.app_label, view_alert.codename) == ("alerting", "view_alert")
    assert not ContentType.objects.filter(
        app_label="supervisor", model__in=["alert", "alertrule", "alertrun"]
    )
    assert read_only.permissions.filter(pk=view_alert.pk).exists()
    viewer = django_user_model.objects.create_user("moved-viewer", is_staff=True)
    viewer.groups.add(read_only)
    assert viewer.has_perm("alerting.view_alert")
    client = Client()
    client.force_login(viewer)
    page = client.get(reverse("admin:alerting_alert_changelist"))
    assert page.status_code == 200
    assert "charge_payment: out of attempts" in page.content.decode()

"""The operator's audit moves from supervisor to ops without moving data (issue 27): with audit rows,
a custom group and a user holding the old `supervisor.*` permissions present, migrating forward
keeps every row (same ids, in the renamed table), and the group, the user and the shipped roles
hold the same permissions under their new names (`ops.*`)."""

from __future__ import annotations

from typing import Any

from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("ops", "0002_roles_staff_work"), ("supervisor", "0009_alertrule_name_and_recipients_checked")]


def _migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    ContentType.objects.clear_cache()
    return executor.loader.project_state(targets).apps


def _tables() -> set[str]:
    with connection.cursor() as cursor:
        return set(connection.introspection.table_names(cursor))


def test_operator_action_moved__rows_kept__groups_and_users_hold_ops_permissions(
    transactional_db: None, django_user_model: Any
) -> None:
    latest = MigrationExecutor(connection).loader.graph.leaf_nodes()
    old = _migrate(BEFORE)
    assert "supervisor_operatoraction" in _tables() and "ops_operatoraction" not in _tables()
    group_model, permission_model = old.get_model("auth", "Group"), old.get_model("auth", "Permission")
    user_model = old.get_model("auth", "User")
    audit_model = old.get_model("supervisor", "OperatorAction")
    resubmit = permission_model.objects.get(content_type__app_label="supervisor", codename="resubmit_step")
    preview = permission_model.objects.get(
        content_type__app_label="supervisor", codename="view_sweep_preview"
    )
    custom = group_model.objects.create(name="Night shift")
    custom.permissions.add(resubmit)
    kim = user_model.objects.create(username="kim", is_staff=True, is_active=True, password="!")
    kim.user_permissions.add(preview)
    kim.groups.add(custom)
    rows = [
        audit_model.objects.create(
            action="breaker_open",
            actor_id=kim.pk,
            actor_name="admin:kim",
            reason="payment down",
            target="payment",
        ),
        audit_model.objects.create(action="bulk_resubmit", actor_name="admin:gone", reason="outage over"),
    ]

    _migrate(latest)

    from django.contrib.auth.models import Group

    from ops.models import OperatorAction
    from ops.roles import OPERATOR_GROUP, READ_ONLY_GROUP

    assert "ops_operatoraction" in _tables() and "supervisor_operatoraction" not in _tables()
    moved = {a.pk: (a.action, a.actor_id, a.reason, a.target) for a in OperatorAction.objects.all()}
    assert moved == {
        rows[0].pk: ("breaker_open", kim.pk, "payment down", "payment"),
        rows[1].pk: ("bulk_resubmit", None, "outage over", ""),
    }
    assert not ContentType.objects.filter(app_label="supervisor", model="operatoraction").exists()
    user = django_user_model.objects.get(pk=kim.pk)
    assert user.has_perm("ops.resubmit_step") and user.has_perm("ops.view_sweep_preview")
    assert not user.has_perm("supervisor.resubmit_step")
    names = {
        f"{p.content_type.app_label}.{p.codename}"
        for p in Group.objects.get(name=OPERATOR_GROUP).permissions.all()
    }
    assert {
        "ops.resubmit_step",
        "ops.bulk_resubmit",
        "ops.operate_breaker",
        "ops.view_operatoraction",
    } <= names
    assert not {n for n in names if n.startswith("supervisor.") and "operatoraction" in n}
    reader = {
        p.codename
        for p in Group.objects.get(name=READ_ONLY_GROUP).permissions.filter(content_type__app_label="ops")
    }
    # ...and every ops model's view permission: the customers' retention policies (issue 29) too.
    assert reader == {"view_operatoraction", "view_retentionpolicy", "view_sweep_preview"}
    # A new audit row gets the next id (the sequence came along with the table).
    assert (
        OperatorAction.objects.create(action="bulk_resubmit", actor_name="admin:kim", reason="x").pk
        > rows[1].pk
    )

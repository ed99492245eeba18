"""The roles that ship (issue 21): two groups, made by the data migration `ops/0001_roles`.

- **Operators (read-only)**: sees the engine - every run, step, history row, alert, audit
  entry, job, order and periodic task, the engine-health page and the dry run of the next sweep -
  and can change nothing: every action URL answers 403 to a POST, and its buttons are not shown.
- **Operators**: everything read-only has, plus every action: cancel / resume / give up a run,
  acknowledge alerts and reset breakers (`scheduler.change_run`, which means "may operate");
  pause / resume / run / edit jobs (`scheduler.change_job`); change the periodic tasks'
  intervals; and each operator tool's own permission (`ops.OperatorAction`'s custom
  permissions, named `supervisor.*` before issue 27: resubmit, compensate, retry a
  compensation, mark one done, hold a breaker, bulk);
  and staff work (`scheduler.staff_work`, issue 26): schedule staff-only work (`task:*`, the
  catalogue's reprice) through the API, the pages and the admin, reprice the catalogue, read any
  user's report, send given-up webhook deliveries again. In the periodic tasks' admin an
  operator edits the schedule only (ops/beat_admin.py).

Superusers have everything. Other staff get exactly what their permissions give: a staff user in
neither group sees nothing of the engine. Permissions are named `app_label.codename`.
"""

from __future__ import annotations

from typing import Any

READ_ONLY_GROUP = "Operators (read-only)"
OPERATOR_GROUP = "Operators"

# Whose models the read-only role may view (every model of these apps).
VIEW_APPS = (
    "scheduler",
    "supervisor",
    "ops",
    "alerting",
    "orders",
    "catalogue",
    "exports",
    "webhooks",
    "django_celery_beat",
)

READ_ONLY_EXTRA = ("ops.view_sweep_preview",)

OPERATOR_EXTRA = (
    "scheduler.change_run",
    "scheduler.change_job",
    "django_celery_beat.change_periodictask",
    "django_celery_beat.add_intervalschedule",
    "ops.resubmit_step",
    "ops.compensate_run",
    "ops.retry_compensation",
    "ops.mark_compensation_done",
    "ops.operate_breaker",
    "ops.bulk_resubmit",
    # Staff work (issue 26, scheduler/permissions.py): staff-only workflows, the catalogue's
    # reprice, any user's report, the admin actions with no narrower permission.
    "scheduler.staff_work",
)


def role_holding(permission: str) -> str | None:
    """The least of the shipped roles whose permissions include `permission` ("app.codename"),
    from the same lists `roles_ensure` gives the groups; None: no role has it (a superuser's)."""
    app_label, _, codename = permission.partition(".")
    if (app_label in VIEW_APPS and codename.startswith("view_")) or permission in READ_ONLY_EXTRA:
        return READ_ONLY_GROUP
    if permission in OPERATOR_EXTRA:
        return OPERATOR_GROUP
    return None


def permission_missing_words(permission: str) -> str:
    """What a refusal says is missing (issue 28: the 403 page and its log line), e.g. "This needs
    the Operators role (permission: Can resubmit a step in Error...)". The permission by its
    name where it exists, else as "app.codename"."""
    from django.contrib.auth.models import Permission

    app_label, _, codename = permission.partition(".")
    found = Permission.objects.filter(content_type__app_label=app_label, codename=codename).first()
    name = found.name if found is not None else permission
    role = role_holding(permission)
    if role is None:
        return f"This needs a permission no role gives, only a superuser has it (permission: {name})."
    return f"This needs the {role} role (permission: {name})."


def _named(permission_model: Any, names: tuple[str, ...]) -> list[Any]:
    found = []
    for name in names:
        app_label, codename = name.split(".", 1)
        found.extend(permission_model.objects.filter(content_type__app_label=app_label, codename=codename))
    return found


def roles_ensure(*, group_model: Any, permission_model: Any) -> dict[str, int]:
    """Create the two groups (or give them back their permissions: an edited group is set to
    the shipped set). Works with the historical models of a migration. Returns permissions per
    group."""
    views = list(
        permission_model.objects.filter(content_type__app_label__in=VIEW_APPS, codename__startswith="view_")
    )
    read_only = views + _named(permission_model, READ_ONLY_EXTRA)
    operator = read_only + _named(permission_model, OPERATOR_EXTRA)
    counts: dict[str, int] = {}
    for name, permissions in ((READ_ONLY_GROUP, read_only), (OPERATOR_GROUP, operator)):
        group, _ = group_model.objects.get_or_create(name=name)
        group.permissions.set(permissions)
        counts[name] = len(permissions)
    return counts

"""Staff accounts in the shipped roles (ops/roles.py), for tests of who may do what (issue 26):
an "Operators" member holds staff work (`scheduler.staff_work`); a read-only operator and staff
in no group hold none of it. The groups are made by the migrations; a live test's flush removes
them, so they are made again (`roles_ensure`) when missing."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.test import Client

from ops.roles import OPERATOR_GROUP, READ_ONLY_GROUP, roles_ensure

ROLES: dict[str, str | None] = {"operator": OPERATOR_GROUP, "read_only": READ_ONLY_GROUP, "no_group": None}


def join_role(user: Any, group: str | None) -> Any:
    """`user` made staff, in `group` only (None: in no group). Returns the user, reloaded (no
    permission cache left from before)."""
    get_user_model().objects.filter(pk=user.pk).update(is_staff=True)
    if group and not Group.objects.filter(name=group).exists():
        roles_ensure(group_model=Group, permission_model=Permission)
    user.groups.set([Group.objects.get(name=group)] if group else [])
    return get_user_model().objects.get(pk=user.pk)


def staff_in(username: str, group: str | None) -> Any:
    """A new staff account (not a superuser) in `group` (None: in no group)."""
    return join_role(get_user_model().objects.create_user(username), group)


def client_of(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client

"""How a person acting through the admin or the operator's tools is named in the history, the run
events, the job's record and the audit: `admin:<username>` (issue 27: one definition for the
scheduler's admin, the jobs admin and the operator's room)."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser


def actor_name(user: AbstractBaseUser | AnonymousUser) -> str:
    """`admin:<username>` for `user` (a request's user or the acting operator)."""
    return f"admin:{user.get_username()}"

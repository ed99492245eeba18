"""Who may do what outside a customer's own data: one rule, asked by the API, the pages, the
admin and the dispatcher (issue 26, "Permissions, not is_staff").

`is_staff` only lets a person into the admin; what they may do there and elsewhere is a named
permission, held through a role (ops/roles.py: the "Operators" group holds them, the
"Operators (read-only)" group and staff in no group hold none). Superusers hold every
permission (Django's ModelBackend).

`STAFF_WORK` ("scheduler.staff_work", a custom permission of the Job model) is staff work:
scheduling staff-only workflows (`task:*`, the shared catalogue's reprice, history exports) as
the person acting and as a job's owner, repricing the catalogue, reading any user's report with
`?user=`, and the admin actions that have no narrower permission of their own (sending given-up
webhook deliveries again). Workflows that are never jobs (webhook deliveries, alert
notifications: `Workflow.job_target`) stay refused to everyone, this permission included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model

STAFF_WORK = "scheduler.staff_work"
# Shown where a refusal names what is missing.
STAFF_WORK_WORDS = "the staff-work permission (the Operators role)"


def staff_may(user: Any, permission: str = STAFF_WORK) -> bool:
    """The one rule: an active staff account holding `permission` (directly, through a group, or
    as a superuser). Anonymous users, customers, and staff without it: False."""
    return bool(
        getattr(user, "is_authenticated", False)
        and user.is_active
        and user.is_staff
        and user.has_perm(permission)
    )


def users_staff_may(*, user_ids: Iterable[int], permission: str = STAFF_WORK) -> set[int]:
    """Of `user_ids`, those for whom `staff_may(user, permission)` holds now - the same rule, in
    one query for a batch (the dispatcher asks it for every job owner at every firing). None for
    no ids."""
    wanted = set(user_ids)
    if not wanted:
        return set()
    users = get_user_model().objects.with_perm(permission, is_active=True, include_superusers=True)
    return set(users.filter(pk__in=wanted, is_staff=True).values_list("pk", flat=True))

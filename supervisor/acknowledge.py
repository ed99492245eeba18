"""An operator acknowledges alerts (issue 21). Kept with the alert models when the operator's
audited actions moved to `ops` (issue 27): the alerts' admin calls it, and it writes no audit."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models.functions import Now

from .models import Alert

logger = logging.getLogger("sas.alerts")


def alert_acknowledge(*, alert_ids: Iterable[int], user: AbstractBaseUser) -> int:
    """Mark the given alerts acknowledged by `user`, now (database clock).

    Invariant: an alert is acknowledged once. The update is conditional on `acknowledged_at IS
    NULL`, so the first operator's time and name stay when two acknowledge at once or one clicks
    twice; already-acknowledged alerts are left alone. Acknowledging changes no run or step: it
    only says a person has seen the alert. Returns how many alerts this call acknowledged.
    Transaction: one UPDATE statement (autocommit, or the caller's transaction).
    """
    ids = list(alert_ids)
    updated = Alert.objects.filter(pk__in=ids, acknowledged_at__isnull=True).update(
        acknowledged_at=Now(), acknowledged_by_id=user.pk
    )
    if updated:
        logger.info("%d alert(s) acknowledged by %s", updated, user.get_username())
    return updated

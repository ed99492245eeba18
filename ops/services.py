"""Operator actions that reach past the engine: a circuit breaker opened or closed by hand.

The breakers are the agents' (shared Redis state, `agents/breaker.py`); the audit entry is the
operator's `OperatorAction` (ops/models.py). The actions on runs are `ops/run_services.py`.
"""

from __future__ import annotations

import redis
from django.contrib.auth.base_user import AbstractBaseUser

from agents.breaker import CLOSED, OPEN, CircuitBreaker

from .audit import OperatorRefused, actor_name, audit_record, reason_checked
from .models import OperatorAction
from .selectors import breaker_is_known

# How long a breaker may be held open or closed by hand: a minute to a day.
BREAKER_HOLD_MIN_MINUTES = 1
BREAKER_HOLD_MAX_MINUTES = 24 * 60


def breaker_operate(
    *, service: str, state: str, minutes: int, user: AbstractBaseUser, reason: str
) -> OperatorAction:
    """Open (calls fail fast, steps deferred without a failure counted) or close (calls flow;
    failures do not open it) the shared breaker of `service` by hand, for `minutes`; then it
    follows its own rules again (an expired open goes half-open and probes). Audited.

    Refused (OperatorRefused, nothing changed): an unknown breaker, a state other than open or
    closed, minutes outside 1..1440, no reason, Redis unreachable."""
    if not breaker_is_known(name=service):
        raise OperatorRefused("input", f"no breaker named {service!r}", {"service": ["unknown breaker"]})
    if state not in (OPEN, CLOSED):
        raise OperatorRefused("input", "state must be open or closed", {"state": ["open or closed"]})
    if not BREAKER_HOLD_MIN_MINUTES <= minutes <= BREAKER_HOLD_MAX_MINUTES:
        raise OperatorRefused(
            "input",
            f"minutes must be between {BREAKER_HOLD_MIN_MINUTES} and {BREAKER_HOLD_MAX_MINUTES}",
            {"minutes": [f"between {BREAKER_HOLD_MIN_MINUTES} and {BREAKER_HOLD_MAX_MINUTES}"]},
        )
    action = OperatorAction.Action.BREAKER_OPEN if state == OPEN else OperatorAction.Action.BREAKER_CLOSE
    why = reason_checked(reason)
    try:
        CircuitBreaker(service).force(state=state, seconds=minutes * 60, by=actor_name(user))
    except redis.RedisError as exc:
        raise OperatorRefused(
            "state", f"Redis could not be reached; the breaker is unchanged ({exc})"
        ) from exc
    return audit_record(
        action=action, user=user, reason=why, target=service, detail={"state": state, "minutes": minutes}
    )

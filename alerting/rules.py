"""The cap on enabled alert rules (issue 26, item 7): the evaluator reads at most
SAS_ALERT_MAX_RULES enabled rules per tick (its cost is bounded), so a rule past the cap would be
enabled and never evaluated. Instead a rule is not enabled past it: a customer's create
(alerting/customer.py) and an operator's add, edit or list "enabled" tick (alerting/admin.py)
ask `alert_rules_enable_refusal`, written once here, and are refused with its message.

Race-free: the count is taken under a transaction-scoped advisory lock, held until the caller's
transaction commits, so two rules enabled at once at the limit cannot both pass it. Rules over
the cap from before (the setting lowered) are not deleted: the evaluator logs them and
/metrics counts them (`sas_alert_rules_not_evaluated`).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.conf import settings
from django.db import connection, transaction

from .models import AlertRule

# pg_advisory_xact_lock key of the enabled-rule count ("sasarcap" in ASCII, shortened).
RULE_CAP_LOCK = 0x7361_7361_7263


def alert_rules_cap_message() -> str:
    cap = settings.SAS_ALERT_MAX_RULES
    return (
        f"at most {cap} alert rules can be enabled on this platform (SAS_ALERT_MAX_RULES: each is "
        "evaluated every few seconds) and that many are: none was added"
    )


def alert_rules_enable_refusal(*, enabling: Sequence[int | None]) -> str | None:
    """Whether the rules `enabling` (ids; None for a rule not yet written) may be enabled: None
    if the enabled rules, these included, stay within SAS_ALERT_MAX_RULES, else why not.
    Must run inside the transaction that writes them (it takes the cap's lock, which that
    transaction's commit releases); reads only."""
    if not enabling:
        return None
    assert transaction.get_connection().in_atomic_block, "call inside the writing transaction"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [RULE_CAP_LOCK])
    ids = [pk for pk in enabling if pk is not None]
    enabled = AlertRule.objects.filter(enabled=True).exclude(pk__in=ids).count()
    if enabled + len(enabling) > settings.SAS_ALERT_MAX_RULES:
        return alert_rules_cap_message()
    return None

"""Customers' own alert rules (seed 004: per-user alerting), scoped by owner like everything
else: a customer reads, creates and deletes rules on their own jobs only, of the kinds in
CUSTOMER_RULE_KINDS, and is notified alone - by e-mail to their account's address (never an
address they type: a rule must not make the platform mail strangers) and/or a webhook to their
https URL, which passes the order callbacks' egress policy now and at every delivery, signed
with their own webhook secret (webhooks/destinations.py, `alert_webhook_url_check`).

Every number is bounded (a rule is evaluated every few seconds: its cost is the platform's),
and a customer has at most SAS_ALERT_RULES_PER_USER rules; none is added past the platform's
SAS_ALERT_MAX_RULES enabled rules (alerting/rules.py: past it, it would never be evaluated).
Bad input raises AlertRuleInputError naming the field and the limit, and nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery

from alerting.models import CUSTOMER_RULE_KINDS, Alert, AlertRule, AlertState, RuleKind
from alerting.rules import alert_rules_enable_refusal
from sasproject.names import control_characters_error
from scheduler.dispatcher.selectors import job_get
from scheduler.models import Job
from webhooks.destinations import UrlRefused, alert_webhook_url_check

# kind -> (threshold minimum, maximum, what the threshold is)
THRESHOLD_LIMITS: dict[str, tuple[float, float, str]] = {
    RuleKind.JOB_FAILURE_RATE: (0.01, 1.0, "a fraction of runs failed, 0.01 to 1"),
    RuleKind.JOB_CONSECUTIVE_FAILURES: (1, 100, "a number of runs, 1 to 100"),
    RuleKind.JOB_MISSED_RUNS: (60, 7 * 86400, "seconds late, 60 to 604800"),
}
MIN_RUNS_LIMITS = (1, 10_000)
WINDOW_MINUTES_LIMITS = (1, 7 * 24 * 60)


class AlertRuleInputError(Exception):
    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


@dataclass(frozen=True)
class CustomerRuleInput:
    job_id: Any
    kind: Any
    threshold: Any
    min_runs: Any = 1
    window_minutes: Any = 60
    notify_email: Any = True
    webhook_url: Any = ""
    name: Any = ""


def customer_rules(*, owner_id: int, job_id: int | None = None) -> QuerySet[AlertRule]:
    """The owner's rules (on one job of theirs if `job_id`), oldest first."""
    qs = AlertRule.objects.filter(owner_id=owner_id).select_related("job").order_by("id")
    return qs if job_id is None else qs.filter(job_id=job_id)


def customer_rules_with_state(*, owner_id: int, job_id: int) -> list[AlertRule]:
    """The owner's rules on one of their jobs, oldest first, each with its open incident if it
    is firing: `firing_message` and `firing_since` (None when quiet). One query (the firing
    alert is a subquery per rule; a user has at most SAS_ALERT_RULES_PER_USER rules)."""
    firing = Alert.objects.filter(rule=OuterRef("pk"), state=AlertState.FIRING).order_by("-id")
    return list(
        customer_rules(owner_id=owner_id, job_id=job_id).annotate(
            firing_message=Subquery(firing.values("message")[:1]),
            firing_since=Subquery(firing.values("fired_at")[:1]),
        )
    )


def customer_rule_get(*, owner_id: int, rule_id: int) -> AlertRule:
    """The owner's rule `rule_id`; AlertRule.DoesNotExist otherwise (another's is not found)."""
    return customer_rules(owner_id=owner_id).get(pk=rule_id)


def _number(
    value: Any, field: str, low: float, high: float, what: str, errors: dict[str, list[str]]
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        errors[field] = [f"must be a number: {what}"]
        return 0.0
    try:
        number = float(value)
    except ValueError:
        errors[field] = [f"must be a number: {what}"]
        return 0.0
    if not low <= number <= high or number != number:
        errors[field] = [f"must be {what}"]
    return number


def customer_rule_create(*, owner_id: int, data: CustomerRuleInput) -> AlertRule:
    """Validate everything, then write one rule on the owner's job. Invariant: a customer's rule
    is on a job they own, of a customer kind, within the limits, with a URL the callback policy
    allows; else AlertRuleInputError and no row. Transaction: its own; the per-user cap is
    counted under a lock on the owner's user row, so two concurrent creates cannot both pass it."""
    errors: dict[str, list[str]] = {}
    job: Job | None = None
    try:
        job = job_get(owner_id=owner_id, job_id=int(data.job_id))
    except (Job.DoesNotExist, TypeError, ValueError):
        errors["job"] = ["no such job of yours"]
    if data.kind not in [k.value for k in CUSTOMER_RULE_KINDS]:
        errors["kind"] = [f"must be one of {', '.join(k.value for k in CUSTOMER_RULE_KINDS)}"]
        low, high, what = 0.0, 0.0, ""
    else:
        low, high, what = THRESHOLD_LIMITS[data.kind]
        _number(data.threshold, "threshold", low, high, what, errors)
    min_runs = _number(data.min_runs, "min_runs", *MIN_RUNS_LIMITS, "a whole number, 1 to 10000", errors)
    if "min_runs" not in errors and min_runs != int(min_runs):
        errors["min_runs"] = ["must be a whole number, 1 to 10000"]
    window = _number(
        data.window_minutes, "window_minutes", *WINDOW_MINUTES_LIMITS, "minutes, 1 to 10080", errors
    )
    if not isinstance(data.notify_email, bool):
        errors["notify_email"] = ["must be true or false"]
    url = ""
    if data.webhook_url not in ("", None):
        try:
            url = alert_webhook_url_check(url=data.webhook_url)
        except UrlRefused as refused:
            errors["webhook_url"] = [refused.customer]
        if len(str(data.webhook_url)) > 500:
            errors["webhook_url"] = ["at most 500 characters"]
    if data.notify_email is False and not url and "webhook_url" not in errors:
        errors["notify_email"] = ["a rule needs a channel: e-mail, a webhook URL, or both"]
    name = str(data.name or "").strip() or f"{data.kind} on job {data.job_id}"
    if len(name) > 100:
        errors["name"] = ["at most 100 characters"]
    elif why := control_characters_error(name):
        errors["name"] = [why]
    if errors:
        raise AlertRuleInputError(errors)
    assert job is not None
    with transaction.atomic():
        # The owner's row, locked: concurrent creates of one owner queue here for the cap.
        type(job.owner).objects.select_for_update().filter(pk=owner_id).first()
        if AlertRule.objects.filter(owner_id=owner_id).count() >= settings.SAS_ALERT_RULES_PER_USER:
            raise AlertRuleInputError(
                {"job": [f"at most {settings.SAS_ALERT_RULES_PER_USER} alert rules per user"]}
            )
        # The platform's cap: a rule past it would never be evaluated (alerting/rules.py).
        if why := alert_rules_enable_refusal(enabling=[None]):
            raise AlertRuleInputError({"job": [why]})
        if AlertRule.objects.filter(owner_id=owner_id, name=name).exists():
            raise AlertRuleInputError({"name": ["you already have a rule with this name"]})
        return AlertRule.objects.create(
            owner_id=owner_id,
            job=job,
            name=name,
            kind=data.kind,
            threshold=float(data.threshold),
            min_runs=int(min_runs),
            window=timedelta(minutes=window),
            severity=AlertRule.Severity.WARNING,
            notify_email=bool(data.notify_email),
            notify_webhook=bool(url),
            webhook_url=url,
            cooldown=timedelta(minutes=5),
        )


def customer_rule_delete(*, owner_id: int, rule_id: int) -> None:
    """Delete the owner's rule (its alerts go with it); AlertRule.DoesNotExist if not theirs."""
    customer_rule_get(owner_id=owner_id, rule_id=rule_id).delete()


def customer_rule_document(rule: AlertRule) -> dict[str, Any]:
    open_alert = rule.alerts.filter(state="firing").order_by("-id").first()
    return {
        "id": rule.pk,
        "name": rule.name,
        "job": rule.job_id,
        "kind": rule.kind,
        "threshold": rule.threshold,
        "min_runs": rule.min_runs,
        "window_minutes": int(rule.window.total_seconds() // 60),
        "notify_email": rule.notify_email,
        "webhook_url": rule.webhook_url,
        "firing": open_alert is not None,
        "message": open_alert.message if open_alert else "",
    }

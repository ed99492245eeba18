"""System checks of the alerting settings (`manage.py check`, every start): the operators' alert
webhook has no default secret (issue 26), so a URL without one is a webhook never sent."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security)
def alert_webhook_secret_check(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    secret = str(settings.SAS_ALERT_WEBHOOK_SECRET or "")
    if settings.SAS_ALERT_WEBHOOK_URL and not secret:
        return [
            checks.Warning(
                "SAS_ALERT_WEBHOOK_URL is set but SAS_ALERT_WEBHOOK_SECRET is not: operator alert "
                "webhooks are not sent (there is no default secret).",
                hint="Set SAS_ALERT_WEBHOOK_SECRET to a long random value and give it to the receiver "
                "(docs/operating/operators.md, Alerts).",
                id="alerting.W001",
            )
        ]
    if secret and secret == settings.SECRET_KEY:
        return [
            checks.Warning(
                "SAS_ALERT_WEBHOOK_SECRET is DJANGO_SECRET_KEY: the alert receiver would hold the key "
                "that signs every session.",
                hint="Give the alert webhook a secret of its own.",
                id="alerting.W002",
            )
        ]
    return []

"""Where webhooks may go: the order callbacks' egress policy (agents/egress.py, issue 18).

`SAS_CALLBACK_ALLOWED_HOSTS` (default `*`: any host with public addresses) and
`SAS_CALLBACK_PRIVATE_HOSTS` (default none). Checked when an order (its subscription) is
submitted - the form and the API answer 400 naming `callback_url` - and again at every
delivery attempt, resolved and pinned (agents/egress_http.py).

A customer's alert webhook (alerting/customer.py) passes the same policy and must be https,
except to a host the operator lets be private (`SAS_CALLBACK_PRIVATE_HOSTS`, or an address
listed by itself): a test or development receiver. Order callbacks may be http (docs/using/api.md).
A refusal shown to a customer is `UrlRefused.customer`: what to change, never a setting.
"""

from __future__ import annotations

from agents.egress import EgressPolicy, UrlRefused, egress_policy_register

CALLBACK_POLICY = egress_policy_register(EgressPolicy(name="order callbacks", prefix="SAS_CALLBACK"))


def webhook_url_check(*, url: str) -> str:
    """The callback URL, normalised, if the callback policy allows it; else UrlRefused with the
    reason (no DNS lookup: a name is resolved and checked at each delivery)."""
    return CALLBACK_POLICY.url_check(url).url


HTTPS_REQUIRED = "Use an https:// address: alerts are only sent over an encrypted connection"


def alert_webhook_url_check(*, url: str) -> str:
    """A customer's alert webhook URL, normalised: the callback policy's rules and https (see
    the module docstring); else UrlRefused (its `customer` message for the form and API)."""
    target = CALLBACK_POLICY.url_check(url)
    if target.scheme != "https" and not target.private_ok:
        raise UrlRefused(
            f"{target.netloc}: an alert webhook must be https (http only to a private host)",
            customer=HTTPS_REQUIRED,
        )
    return target.url


__all__ = ["CALLBACK_POLICY", "HTTPS_REQUIRED", "UrlRefused", "alert_webhook_url_check", "webhook_url_check"]

"""Where webhooks may go: the order callbacks' egress policy (agents/egress.py, issue 18).

`SAS_CALLBACK_ALLOWED_HOSTS` (default `*`: any host with public addresses) and
`SAS_CALLBACK_PRIVATE_HOSTS` (default none). Checked when an order (its subscription) is
submitted - the form and the API answer 400 naming `callback_url` - and again at every
delivery attempt, resolved and pinned (agents/egress_http.py).
"""

from __future__ import annotations

from agents.egress import EgressPolicy, UrlRefused, egress_policy_register

CALLBACK_POLICY = egress_policy_register(EgressPolicy(name="order callbacks", prefix="SAS_CALLBACK"))


def webhook_url_check(*, url: str) -> str:
    """The callback URL, normalised, if the callback policy allows it; else UrlRefused with the
    reason (no DNS lookup: a name is resolved and checked at each delivery)."""
    return CALLBACK_POLICY.url_check(url).url


__all__ = ["CALLBACK_POLICY", "UrlRefused", "webhook_url_check"]

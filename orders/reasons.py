"""What a customer reads about a failed attempt and about the order as a whole.

The engine records remote errors as operators need them (`payment refused (402):
{"error":"card_declined"}`); those stay in the admin and the API. A person on the status page gets
a sentence instead. The sentences belong to the order domain: the engine knows nothing of cards
or stock.
"""

from __future__ import annotations

from agents import error_texts
from sasproject.json_input import json_parse
from scheduler.models import Run

# The remote services of the order workflow, as a customer would name them.
SERVICE_NAMES: dict[str, str] = {"inventory": "stock", "payment": "payment", "shipping": "shipping"}

# Refusal codes the remote services answer with (docs/developing/simulator.md), as sentences.
REFUSALS: dict[str, str] = {
    "card_declined": "Your card was declined, so no money was taken.",
    "out_of_stock": "An item in your order is out of stock.",
    "rejected": "The {service} service turned the request down.",
    "voided": "This step had already been undone.",
}

# The agents' error texts (agents/base.py) and the supervisor's (supervisor/services.py): read
# as agents/error_texts.py says, shared with the job pages (jobs/reasons.py).
_REFUSED = error_texts.REFUSED
_UNAVAILABLE = error_texts.UNAVAILABLE
_NO_REPLY = error_texts.NO_REPLY
_NOT_STARTED = error_texts.NOT_STARTED
_CANCELLED = error_texts.CANCELLED


def service_of(operation: str) -> str:
    """ "agents.payment.charge" -> "payment" (the customer's word for it)."""
    parts = operation.split(".")
    service = parts[1] if len(parts) >= 3 else operation
    return SERVICE_NAMES.get(service, service)


def customer_reason(*, operation: str, error: str) -> str:
    """The sentence a customer reads for one failed attempt whose raw error is `error`."""
    service = service_of(operation)
    text = error.strip()
    if not text:
        return ""
    refused = _REFUSED.match(text)
    if refused:
        try:
            # A remote service's words: read with the users' limits (depth, NUL), never a crash.
            body = json_parse(refused.group("body"))
        except ValueError:
            body = None
        code = body.get("error") if isinstance(body, dict) else None
        if isinstance(code, str) and code in REFUSALS:
            return REFUSALS[code].format(service=service)
        return f"The {service} service turned the request down."
    if _UNAVAILABLE.match(text):
        return f"The {service} service was not available at that moment."
    if _NO_REPLY.match(text):
        return f"The {service} service did not answer in time."
    if _NOT_STARTED.match(text):
        return "We were busy and are trying again."
    if _CANCELLED.match(text):
        return "Stopped because the order was cancelled."
    return "Something went wrong on our side with this step."


def order_banner(*, run: Run, failure: str) -> tuple[str, str]:
    """(tone, sentence) for the top of the status page, following the run's state. `failure` is
    the customer reason of the step that made the order fail, if one did. Tones: info, success,
    warn, neutral, error (the CSS classes of the page's alerts)."""
    because = f" {failure}" if failure else ""
    state = run.state
    if state in (Run.State.PENDING, Run.State.RUNNING):
        return "info", "Order placed. It is being processed now."
    if state == Run.State.COMPLETED:
        return "success", "Your order is complete: the items are reserved, paid for and on their way."
    if state == Run.State.COMPENSATING and run.cancel_requested:
        return "neutral", "Cancelling your order: the steps already done are being undone."
    if state == Run.State.COMPENSATING:
        return "warn", f"Your order could not be completed.{because} The steps already done are being undone."
    if state == Run.State.CANCELLED:
        return "neutral", "You cancelled this order. Everything done so far has been undone."
    if state == Run.State.COMPENSATED:
        return "warn", f"Your order could not be completed.{because} Everything done so far has been undone."
    return (
        "error",
        "Your order could not be completed, and undoing it needs our staff: they have been alerted "
        "and will put it right.",
    )

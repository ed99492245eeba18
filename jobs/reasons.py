"""What a customer reads about a job's run that failed, and about a failed attempt of its steps.

The engine records errors as operators need them (`failed_transient 3 times (limit 3): GET
https://api.example/x answered 500: {"detail": ...}`); the job pages show a sentence instead
("The service at api.example answered with a server error (HTTP 500). Gave up after 3 failed
attempts."), and the raw text only on demand (a <details> under it) - the job is the user's own
configuration, as an API client's is, and an operator needs the words as they were. The texts
are read as agents/error_texts.py says, the same reading as the order pages' (orders/reasons.py);
the sentences are the jobs' own: a job calls services and runs tasks, it has no cards or stock.
"""

from __future__ import annotations

from http import HTTPStatus
from urllib.parse import urlsplit

from agents import error_texts
from scheduler.workflows import step_label_of


def _host(url: str) -> str:
    try:
        host = urlsplit(url).hostname
    except ValueError:
        host = None
    return host or "the service"


def _status_text(status: int) -> str:
    try:
        return f"HTTP {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _attempts(count: str) -> str:
    return "1 failed attempt" if count == "1" else f"{count} failed attempts"


def attempt_reason(error: str) -> str:
    """The sentence for one raw attempt error ("" for none)."""
    text = error.strip()
    if not text:
        return ""
    if m := error_texts.HTTP_ANSWERED.match(text):
        status, host = int(m.group("status")), _host(m.group("url"))
        if status >= 500:
            return f"The service at {host} had a server error ({_status_text(status)})."
        if status == 429:
            return f"The service at {host} asked us to slow down ({_status_text(status)})."
        return f"The service at {host} refused the request ({_status_text(status)})."
    if m := error_texts.HTTP_TIMED_OUT.match(text):
        return f"The service at {_host(m.group('url'))} did not answer in time."
    if m := error_texts.HTTP_UNREACHABLE.match(text):
        return f"The service at {_host(m.group('url'))} could not be reached."
    if error_texts.NO_REPLY.match(text):
        return "No answer came in time."
    if error_texts.NOT_STARTED.match(text):
        return "Our workers were busy; it was tried again."
    if error_texts.CANCELLED.match(text):
        return "Stopped: the run was cancelled."
    if error_texts.UNAVAILABLE.match(text):
        return "The service was not available at that moment."
    if error_texts.REFUSED.match(text):
        return "The service turned the request down."
    if m := error_texts.TASK_RAISED.match(text):
        return f"The task stopped with an error ({m.group('exception')})."
    return "Something went wrong in this step."


def run_reason(error: str, *, workflow: str = "") -> str:
    """The sentence for a run's (or a job history row's) error: which step failed (by its label
    in `workflow`: scheduler.workflows.step_label_of), why, and how often it was tried."""
    text = error.strip()
    if not text:
        return ""
    step = ""
    if m := error_texts.COMPENSATION_FAILED.match(text):
        return (
            "Undoing a step failed, so the run needs our staff: they have been alerted. "
            + run_reason(m.group("error"))
        ).strip()
    if m := error_texts.STEP_FAILED.match(text):
        step, text = step_label_of(workflow, m.group("step")), m.group("error")
    tries = ""
    if m := error_texts.GAVE_UP.match(text):
        tries, text = f" Gave up after {_attempts(m.group('count'))}.", m.group("error")
    elif m := error_texts.DEADLINE_PASSED.match(text):
        tries = f" Gave up when its deadline passed, after {_attempts(m.group('count'))}."
        text = m.group("error")
    elif text.startswith("skipped: "):
        return "Skipped: " + text.removeprefix("skipped: ")
    where = f"The step “{step}” failed: " if step else ""
    reason = attempt_reason(text)
    if where:
        reason = reason[:1].lower() + reason[1:]
    return f"{where}{reason}{tries}"

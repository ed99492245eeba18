"""Issue 26, item 7, in the operators' alerting:

- an operator rule's name with a CR/LF (or bad recipients) is refused in the admin, nothing
  written; a rule stored before the check still has its e-mail sent, the subject's control
  characters replaced (Django refused the message with BadHeaderError and the alert was lost);
- the operator alert webhook has no default secret: unset, nothing is signed with
  DJANGO_SECRET_KEY - no run is queued, an attempt made anyway sends nothing, and `check` warns.
"""

from __future__ import annotations

import email
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core import checks, mail
from django.test import Client
from django.urls import reverse

from agents.faults import PermanentFault
from alerting.models import AlertRule
from alerting.tasks import alert_email_send
from alerting.webhook import ALERT_WEBHOOK_WORKFLOW, AlertWebhookAgent
from sastools.harness import REPO
from scheduler.models import Run

from .conftest import job, rule, run, user
from .test_rules import only_alert, tick

pytestmark = pytest.mark.usefixtures("no_rules")

ADMIN_RULE = {
    "kind": "run_needs_operator",
    "target": "",
    "enabled": "on",
    "threshold": "0.5",
    "min_runs": "5",
    "window": "00:15:00",
    "for_duration": "00:00:00",
    "severity": "warning",
    "cooldown": "00:05:00",
    "recipients": "",
    "webhook_url": "",
}
ADD = reverse("admin:alerting_alertrule_add")


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("ops-names", "ops@example.com", None))
    return client


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"name": "Payments\r\nBcc: victim@example.com"}, "name", id="crlf-name"),
        pytest.param({"name": "Pay\u202ements"}, "name", id="bidi-name"),
        pytest.param({"recipients": "ops@example.com\r\nBcc: victim@x.example"}, "recipients", id="crlf-to"),
        pytest.param({"recipients": "ops@example.com, not an address"}, "recipients", id="not-an-address"),
    ],
)
def test_admin_add__control_character_or_bad_recipient__error_on_the_field_nothing_written(
    staff: Client, change: dict[str, str], field: str
) -> None:
    response = staff.post(ADD, {**ADMIN_RULE, "name": "Payments", **change})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors.get(field), response.context["adminform"].form.errors
    assert not AlertRule.objects.exists()


def test_admin_change__crlf_in_name__error_and_the_rule_unchanged(staff: Client) -> None:
    r = rule("run_needs_operator", name="Payments")
    before = AlertRule.objects.values().get(pk=r.pk)

    response = staff.post(
        reverse("admin:alerting_alertrule_change", args=[r.pk]),
        {**ADMIN_RULE, "name": "Payments\nX-Injected: 1"},
    )

    assert response.status_code == 200 and response.context["adminform"].form.errors["name"]
    assert AlertRule.objects.values().get(pk=r.pk) == before


def test_email__rule_name_stored_with_crlf_before_the_check__sent_with_the_subject_cleaned(
    django_capture_on_commit_callbacks: Any,
) -> None:
    # As a row written before names were checked: create() runs no validator.
    r = rule(
        "run_needs_operator",
        name="Payments\r\nBcc: victim@example.com",
        notify_email=True,
        recipients="ops@example.com",
    )
    failed = run(state="failed")
    with django_capture_on_commit_callbacks():
        tick()
    alert = only_alert(r)

    assert alert_email_send(alert_id=alert.pk, state="firing")  # no BadHeaderError

    (message,) = mail.outbox
    assert message.to == ["ops@example.com"] and not message.bcc
    assert "\r" not in message.subject and "\n" not in message.subject
    assert "FIRING: Payments  Bcc: victim@example.com" in message.subject
    assert str(failed.pk) in message.body
    # The whole message serialises (the SMTP backend's step) with no injected header.
    parsed = email.message_from_string(message.message().as_string())
    assert parsed["Bcc"] is None and parsed["To"] == "ops@example.com"


def test_email__customer_job_rule_with_crlf_stored__sent_to_the_owner_only() -> None:
    alice = user("alice")
    j = job(alice)
    r = AlertRule.objects.create(
        name="mine\nBcc: victim@example.com",
        kind="job_consecutive_failures",
        owner=alice,
        job=j,
        threshold=1,
        cooldown=timedelta(0),
    )
    run(state="compensated", job=j)
    tick()

    assert alert_email_send(alert_id=only_alert(r).pk, state="firing")
    (message,) = mail.outbox
    assert message.to == [alice.email] and "\n" not in message.subject


# -- the operator alert webhook's secret -------------------------------------------------------------


def test_settings__no_alert_webhook_secret_in_the_environment__none_not_the_secret_key() -> None:
    env = {k: v for k, v in os.environ.items() if k != "SAS_ALERT_WEBHOOK_SECRET"}
    env["DJANGO_SECRET_KEY"] = "a-real-secret-key-for-this-test-" + "x" * 30
    # The settings as a process started without the variable reads them (no django.setup():
    # loading every app adds seconds and nothing to a setting's value).
    code = "from django.conf import settings; print(repr(settings.SAS_ALERT_WEBHOOK_SECRET))"

    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )

    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "''"


def test_operator_rule_webhook__no_secret__no_run_queued_and_logged(settings: Any, caplog: Any) -> None:
    settings.SAS_ALERT_WEBHOOK_SECRET = ""
    r = rule("run_needs_operator", notify_webhook=True, webhook_url="https://alerts.example.com/hook")
    run(state="failed")

    with caplog.at_level("ERROR", logger="sas.alerts"):
        tick()

    assert only_alert(r).state == "firing"
    assert not Run.objects.filter(workflow=ALERT_WEBHOOK_WORKFLOW).exists()
    assert "SAS_ALERT_WEBHOOK_SECRET is not set" in caplog.text


def test_operator_rule_webhook__secret_set__run_queued(settings: Any) -> None:
    settings.SAS_ALERT_WEBHOOK_SECRET = "a-dedicated-alert-secret"
    rule("run_needs_operator", notify_webhook=True, webhook_url="https://alerts.example.com/hook")
    run(state="failed")

    tick()

    assert Run.objects.filter(workflow=ALERT_WEBHOOK_WORKFLOW).count() == 1


class _Receiver:
    def __init__(self) -> None:
        self.posts: list[bytes] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                posts.append(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    r = _Receiver()
    yield r
    r.server.shutdown()
    r.server.server_close()


def test_alert_webhook_attempt__no_secret__given_up_and_nothing_posted(
    settings: Any, receiver: _Receiver
) -> None:
    """A run queued before the secret was removed (or made by hand): the agent's attempt is a
    permanent failure before any request - never a POST signed with an empty or a borrowed key."""
    settings.SAS_ALERT_WEBHOOK_SECRET = ""
    settings.SAS_ALERT_WEBHOOK_PRIVATE_HOSTS = [f"127.0.0.1:{receiver.port}"]
    payload: dict[str, Any] = {
        "url": f"http://127.0.0.1:{receiver.port}/alerts",
        "body": '{"event": "alert.firing"}',
        "owner_id": None,
        "headers": {},
    }

    with pytest.raises(PermanentFault, match="SAS_ALERT_WEBHOOK_SECRET is not set"):
        AlertWebhookAgent().call_remote(path="", payload=payload, idempotency_key="k", timeout=5)

    assert receiver.posts == []


def test_check__alert_webhook_url_without_a_secret__warning(settings: Any) -> None:
    settings.SAS_ALERT_WEBHOOK_URL = "https://alerts.example.com/hook"
    settings.SAS_ALERT_WEBHOOK_SECRET = ""
    ids = {m.id for m in checks.run_checks(tags=[checks.Tags.security])}
    assert "alerting.W001" in ids

    settings.SAS_ALERT_WEBHOOK_SECRET = settings.SECRET_KEY
    assert "alerting.W002" in {m.id for m in checks.run_checks(tags=[checks.Tags.security])}

    settings.SAS_ALERT_WEBHOOK_SECRET = "a-dedicated-alert-secret"
    found = {m.id for m in checks.run_checks(tags=[checks.Tags.security])}
    assert not found & {"alerting.W001", "alerting.W002"}

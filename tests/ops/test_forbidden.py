"""The 403 page (issue 28, ops/forbidden.py): a staff account without the role a page needs got
a bare, unstyled "403 Forbidden" with no way back, and a traceback in the log. Now: the admin's
look, the missing role and permission named, links back, and one WARNING line without a
traceback."""

from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory
from django.urls import reverse

from ops.forbidden import permission_denied
from ops.roles import OPERATOR_GROUP, READ_ONLY_GROUP, role_holding
from scheduler.models import Step
from tests.admin.factories import order_failed
from tests.roles import client_of, join_role

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

RUN_VIEW = "This needs the Operators (read-only) role (permission: Can view run)."
RESUBMIT = (
    "This needs the Operators role (permission: Can resubmit a step in Error, or start a new run of a "
    "compensated run)."
)


@pytest.fixture
def customer(db: None) -> Any:
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="alice")
    return user


def _staff(django_user_model: Any, name: str, group: str | None = None) -> Client:
    """A staff account in `group` only (tests.roles.join_role: the roles made again if a
    transactional test's flush emptied the groups)."""
    return client_of(join_role(django_user_model.objects.create_user(name), group))


def _request_log(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("django.")]


def test_no_role_staff__run_page__styled_403_naming_the_role_with_links_back(
    django_user_model: Any, customer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = order_failed(customer).run_id
    client = _staff(django_user_model, "staff-norole")
    url = reverse("admin:scheduler_run_change", args=[run_id])
    caplog.clear()
    with caplog.at_level(logging.INFO):
        response = client.get(url, HTTP_REFERER="http://testserver/admin/")
    page = response.content.decode()

    assert response.status_code == 403
    assert RUN_VIEW in page
    # The admin's page: its base template, its stylesheets, its header; and the way back.
    assert "admin/base_site.html" in [t.name for t in response.templates]
    assert "scheduler/admin.css" in page and "admin/css/base.css" in page
    assert "sasproject operations" in page
    assert 'href="/admin/" id="forbidden-home"' in page
    assert 'href="http://testserver/admin/" id="forbidden-back"' in page


def test_no_role_staff__refused__one_warning_line_without_traceback(
    django_user_model: Any, customer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Django logs a PermissionDenied with its traceback (exc_info): it read as a crash."""
    run_id = order_failed(customer).run_id
    client = _staff(django_user_model, "staff-norole")
    url = reverse("admin:scheduler_run_change", args=[run_id])
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert client.get(url).status_code == 403
    # One WARNING line that says what was missing; no traceback, nothing at ERROR.
    logged = _request_log(caplog)
    assert [r.exc_info for r in logged] == [None]
    assert [(r.levelname, r.getMessage()) for r in logged] == [
        ("WARNING", f"Forbidden (Permission denied): {url} - {RUN_VIEW}")
    ]
    assert not any(r.levelno >= logging.ERROR for r in caplog.records if r.name.startswith("django"))


def test_read_only_operator__resubmit_page__403_names_the_operators_role(
    django_user_model: Any, customer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = order_failed(customer).run_id
    release = Step.objects.get(run_id=run_id, name="release_inventory")
    client = _staff(django_user_model, "viewer", READ_ONLY_GROUP)
    url = reverse("admin:scheduler_run_act", args=[run_id, "resubmit_step"]) + f"?step={release.pk}"
    caplog.clear()
    with caplog.at_level(logging.INFO):
        get = client.get(url)
        post = client.post(url, {"step": release.pk, "reason": "x", "seen": ""})

    for response in (get, post):
        assert response.status_code == 403
        assert RESUBMIT in response.content.decode()
    assert all(r.exc_info is None and r.levelno == logging.WARNING for r in _request_log(caplog))
    assert len(_request_log(caplog)) == 2
    release.refresh_from_db()
    assert release.process_state == "error"  # the refusal changed nothing


def test_referer_of_another_site__no_back_link(django_user_model: Any, customer: Any) -> None:
    run_id = order_failed(customer).run_id
    client = _staff(django_user_model, "staff-norole")
    response = client.get(
        reverse("admin:scheduler_run_change", args=[run_id]), HTTP_REFERER="https://evil.example/phish"
    )
    page = response.content.decode()
    assert response.status_code == 403
    assert "evil.example" not in page and 'id="forbidden-back"' not in page
    assert 'href="/admin/" id="forbidden-home"' in page


def test_forbidden_outside_the_admin__the_sites_page(rf: RequestFactory) -> None:
    request = rf.get("/jobs/")
    request.user = AnonymousUser()
    response = permission_denied(request, PermissionDenied("This needs the staff-work permission."))
    page = response.content.decode()
    assert response.status_code == 403
    assert "This needs the staff-work permission." in page
    assert "orders/app.css" in page and "admin/css/base.css" not in page
    assert 'href="/" id="forbidden-home"' in page


def test_role_holding__the_shipped_roles() -> None:
    assert role_holding("scheduler.view_run") == READ_ONLY_GROUP
    assert role_holding("ops.view_sweep_preview") == READ_ONLY_GROUP
    assert role_holding("ops.resubmit_step") == OPERATOR_GROUP
    assert role_holding("scheduler.change_run") == OPERATOR_GROUP
    assert role_holding("auth.view_user") is None
    assert role_holding("scheduler.delete_run") is None


def test_log_filter__only_a_permission_denied_403_loses_its_traceback() -> None:
    """A 500's traceback (or a 403 answered for another reason) is kept: only the expected
    refusal is shortened to one line."""
    from sasproject.logs import ExpectedForbiddenFilter

    def record(status: int, exc: BaseException) -> logging.LogRecord:
        try:
            raise exc
        except BaseException:
            made = logging.LogRecord(
                "django.request", logging.ERROR, __file__, 1, "%s", ("/x/",), sys.exc_info()
            )
        made.status_code = status
        return made

    crash = record(500, ValueError("boom"))
    other = record(403, ValueError("not a refusal"))
    refusal = record(403, PermissionDenied("This needs the Operators role (permission: x)."))
    for r in (crash, other, refusal):
        assert ExpectedForbiddenFilter().filter(r) is True
    assert crash.exc_info is not None and other.exc_info is not None
    assert refusal.exc_info is None
    assert refusal.getMessage() == "/x/ - This needs the Operators role (permission: x)."

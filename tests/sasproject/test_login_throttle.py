"""Sign-in throttling on the site's and the admin's forms (issue 22): brute force is refused with
a form error naming the limit, per username and per address, even for the right password; a
success clears its username's count. Real Redis, real views through Django's test client."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

PASSWORD = "correct horse battery staple"
THROTTLE = {"FAILURES_PER_USERNAME": 3, "FAILURES_PER_IP": 5, "WINDOW": 600}

FORMS = [
    pytest.param("/accounts/login/", False, id="site"),
    pytest.param("/admin/login/", True, id="admin"),
]


@pytest.fixture
def account(db: None) -> Any:
    def make(name: str, *, staff: bool) -> Any:
        user = get_user_model().objects.create_user(name, f"{name}@example.com", PASSWORD)
        user.is_staff = user.is_superuser = staff
        user.save()
        return user

    return make


def _post(client: Client, url: str, username: str, password: str, ip: str = "10.0.0.1") -> Any:
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=ip)


def _signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


@override_settings(SAS_LOGIN_THROTTLE=THROTTLE)
@pytest.mark.parametrize(("url", "staff"), FORMS)
def test_login__failures_per_username__refused_even_with_right_password(
    account: Any, url: str, staff: bool
) -> None:
    account("victim", staff=staff)
    client = Client()
    for attempt in range(3):
        response = _post(client, url, "victim", f"guess-{attempt}")
        assert response.status_code == 200 and "Too many failed" not in response.content.decode()
    response = _post(client, url, "victim", PASSWORD)
    body = response.content.decode()
    assert response.status_code == 200
    assert "Too many failed sign-in attempts for this username: the limit is 3 per 10 minutes" in body
    assert not _signed_in(client)
    # Another address, same username: still refused (the count is the username's).
    response = _post(Client(), url, "VICTIM ", PASSWORD, ip="10.9.9.9")
    assert "Too many failed sign-in attempts for this username" in response.content.decode()


@override_settings(SAS_LOGIN_THROTTLE=THROTTLE)
@pytest.mark.parametrize(("url", "staff"), FORMS)
def test_login__failures_per_address__refuse_other_usernames(account: Any, url: str, staff: bool) -> None:
    account("bystander", staff=staff)
    client = Client()
    for n in range(5):  # five different usernames, two tries each at most -> under the username limit
        _post(client, url, f"user{n}", "wrong", ip="10.0.0.7")
    response = _post(client, url, "bystander", PASSWORD, ip="10.0.0.7")
    assert "Too many failed sign-in attempts for this address: the limit is 5" in response.content.decode()
    assert not _signed_in(client)
    # From another address the account signs in.
    other = Client()
    response = _post(other, url, "bystander", PASSWORD, ip="10.0.0.8")
    assert response.status_code == 302 and _signed_in(other)


@override_settings(SAS_LOGIN_THROTTLE=THROTTLE)
@pytest.mark.parametrize(("url", "staff"), FORMS)
def test_login__success_clears_username_count(account: Any, url: str, staff: bool) -> None:
    account("forgetful", staff=staff)
    for _ in range(2):
        _post(Client(), url, "forgetful", "typo")
    client = Client()
    assert _post(client, url, "forgetful", PASSWORD).status_code == 302 and _signed_in(client)
    for _ in range(2):  # two more failures: 2, not 4, so still allowed
        _post(Client(), url, "forgetful", "typo", ip="10.0.0.2")
    client = Client()
    assert _post(client, url, "forgetful", PASSWORD, ip="10.0.0.3").status_code == 302


@override_settings(SAS_LOGIN_THROTTLE=THROTTLE)
def test_login__garbage_usernames__counted_without_error(db: None) -> None:
    """A username an attacker types - long, NUL-free unicode, surrogates refused by the form - is
    hashed into the key: no 500, the count still applies."""
    client = Client()
    name = "ü" * 140 + "\u202e"
    for _ in range(3):
        assert _post(client, "/accounts/login/", name, "x", ip="10.1.1.1").status_code == 200
    assert "for this username" in _post(client, "/accounts/login/", name, "x", ip="10.1.1.2").content.decode()

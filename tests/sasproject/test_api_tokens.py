"""API tokens (issue 26): stored hashed, shown once, expiring, rotated and revoked by their owner
(the API and the page), revoked by a password change; DRF's clear keys moved over by the
migration so existing clients keep working. Real PostgreSQL, the real views."""

from __future__ import annotations

import importlib
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.hashers import make_password
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from sasproject.tokens.models import ApiToken
from sasproject.tokens.services import api_token_rotate

from ..orders.conftest import make_user

URL = "/api/orders/"
PASSWORD = "pw-for-tests-1"  # make_user's


def _api(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_token__database_holds_no_clear_key(db: None) -> None:
    user = make_user("hashed")
    out = StringIO()
    call_command("create_api_token", user.username, stdout=out)
    key = out.getvalue().strip()
    assert _api(key).get(URL).status_code == 200
    # Every column of every row of the token table: the key is in none of them.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {ApiToken._meta.db_table}")
        cells = [str(cell) for row in cursor.fetchall() for cell in row]
    assert cells and not any(key in cell for cell in cells)
    assert not any(cell == key[:8] + key[8:] for cell in cells)
    assert "authtoken_token" not in connection.introspection.table_names()


def test_token__expired__401_naming_the_expiry(db: None) -> None:
    user = make_user("expiring")
    issued = api_token_rotate(user_id=user.pk)
    assert issued.token.expires_at > timezone.now() + timedelta(days=89)  # SAS_API_TOKEN_DAYS = 90
    ApiToken.objects.filter(pk=issued.token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _api(issued.key).get(URL)
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"
    assert "Token expired on" in response.json()["detail"]


def test_token__rotated_through_the_api__old_key_refused_new_one_works(db: None) -> None:
    user = make_user("rotating")
    old = api_token_rotate(user_id=user.pk).key
    response = _api(old).post("/api/token/rotate/")
    assert response.status_code == 201 and response["Cache-Control"] == "no-store"
    new = response.json()["key"]
    assert new != old and response.json()["prefix"] == new[:8]
    assert _api(old).get(URL).status_code == 401
    assert _api(new).get(URL).status_code == 200
    described = _api(new).get("/api/token/").json()
    assert described["prefix"] == new[:8] and "key" not in described and described["expired"] is False


def test_token__revoked_through_the_api__refused(db: None) -> None:
    user = make_user("revoking")
    key = api_token_rotate(user_id=user.pk).key
    assert _api(key).delete("/api/token/").status_code == 204
    assert _api(key).get(URL).status_code == 401
    # With no token left, the session sees none and a second revoke is a 404.
    assert _signed_in(user).get("/api/token/").status_code == 404


def test_token__page__made_shown_once_rotated_revoked(db: None) -> None:
    user = make_user("paged")
    client = _signed_in(user)
    assert "You have no API token." in client.get("/account/api-token/").content.decode()
    made = client.post("/account/api-token/", {"action": "rotate"})
    first = made.context["new_key"]
    assert first in made.content.decode() and _api(first).get(URL).status_code == 200
    # Shown once: the page afterwards has only its first characters.
    page = client.get("/account/api-token/").content.decode()
    assert first not in page and f"{first[:8]}…" in page
    second = client.post("/account/api-token/", {"action": "rotate"}).context["new_key"]
    assert _api(first).get(URL).status_code == 401 and _api(second).get(URL).status_code == 200
    assert client.post("/account/api-token/", {"action": "revoke"}).status_code == 302
    assert _api(second).get(URL).status_code == 401
    # Bad input: an unknown action changes nothing.
    third = client.post("/account/api-token/", {"action": "rotate"}).context["new_key"]
    assert client.post("/account/api-token/", {"action": "drop-table"}).status_code == 302
    assert _api(third).get(URL).status_code == 200
    # Not signed in: the sign-in page, nothing shown.
    anonymous = Client().get("/account/api-token/")
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]


def test_token__password_change_revokes_it(db: None) -> None:
    user = make_user("changing")
    key = api_token_rotate(user_id=user.pk).key
    user.first_name = "Other"
    user.save()  # a save without a new password keeps it
    assert _api(key).get(URL).status_code == 200
    user.set_password("a-new-password-2")
    user.save()
    assert _api(key).get(URL).status_code == 401
    assert not ApiToken.objects.filter(user=user).exists()
    # An unusable password (an API-only account made so later) revokes too.
    key = api_token_rotate(user_id=user.pk).key
    user.set_unusable_password()
    user.save()
    assert _api(key).get(URL).status_code == 401


def test_token__password_rehashed_on_sign_in__kept(db: None, settings: Any) -> None:
    """Django re-hashes a password stored with an older hasher when its owner signs in: the same
    password, no change - the token stays."""
    settings.PASSWORD_HASHERS = [  # Django's own order (tests/conftest.py puts a fast one first)
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    ]
    user = make_user("upgraded")
    user.password = make_password(PASSWORD, hasher="pbkdf2_sha1")
    user.save()
    key = api_token_rotate(user_id=user.pk).key
    assert Client().login(username=user.username, password=PASSWORD)
    user.refresh_from_db()
    assert user.password.startswith("pbkdf2_sha256$")  # it was re-hashed...
    assert _api(key).get(URL).status_code == 200  # ...and the token kept


def test_token__migration_from_drf_clear_keys__old_key_works_table_gone(db: None) -> None:
    user = make_user("migrated")
    old_key = "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b"
    with connection.cursor() as cursor:
        cursor.execute(
            'CREATE TABLE authtoken_token ("key" varchar(40) PRIMARY KEY, "created" timestamptz NOT NULL, '
            '"user_id" integer NOT NULL UNIQUE)'
        )
        cursor.execute("INSERT INTO authtoken_token VALUES (%s, now(), %s)", [old_key, user.pk])
    migration = importlib.import_module("sasproject.tokens.migrations.0002_from_authtoken")
    with connection.schema_editor() as editor:
        migration.clear_tokens_hashed(django_apps, editor)
    assert "authtoken_token" not in connection.introspection.table_names()
    token = ApiToken.objects.get(user=user)
    assert token.prefix == old_key[:8] and old_key not in token.digest
    assert token.expires_at > timezone.now() + timedelta(days=89)
    assert _api(old_key).get(URL).status_code == 200


@pytest.mark.parametrize("key", ["", "x" * 101, "9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", "ünïcode"])
def test_token__garbage_keys__401(db: None, key: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}".encode().decode("latin-1"))
    response = client.get(URL)
    assert response.status_code == 401 and response["WWW-Authenticate"] == "Token"

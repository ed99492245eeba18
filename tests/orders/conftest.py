"""Fixtures for the order API and pages: users with tokens, API clients, a generous submit rate
(the 429 test lowers it)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from rest_framework.test import APIClient

_names = itertools.count()

ORDER = {"items": [{"sku": "SKU-1", "quantity": 2}], "amount": "25.00", "currency": "EUR"}


@pytest.fixture(autouse=True)
def _generous_submit_rate(settings: Any) -> None:
    settings.SAS_SUBMIT_RATE = "10000/minute"


def make_user(prefix: str = "user") -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=f"{prefix}{next(_names)}", password="pw-for-tests-1")


_keys: dict[int, str] = {}


def token_key(user: Any) -> str:
    """The user's API key: the one made earlier in this test when it still works (keys are stored
    hashed, so it cannot be read back), else a new one."""
    from sasproject.tokens.services import api_token_find, api_token_rotate

    key = _keys.get(user.pk)
    found = api_token_find(key=key) if key else None
    if key is None or found is None or found.user_id != user.pk:
        key = _keys[user.pk] = api_token_rotate(user_id=user.pk).key
    return key


def token_client(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_key(user)}")
    return client


@pytest.fixture
def user(db: None) -> Any:
    return make_user("alice")


@pytest.fixture
def other_user(db: None) -> Any:
    return make_user("bob")


@pytest.fixture
def api(user: Any) -> APIClient:
    return token_client(user)


@pytest.fixture
def other_api(other_user: Any) -> APIClient:
    return token_client(other_user)

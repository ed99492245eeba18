from __future__ import annotations

from typing import Any

import pytest
from django.test import Client


@pytest.fixture
def operator(db: None) -> Any:
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_superuser("ops", "ops@example.com", None)  # no hash: fast


@pytest.fixture
def staff_client(operator: Any) -> Client:
    client = Client()
    client.force_login(operator)
    return client


@pytest.fixture
def customer(db: None) -> Any:
    from django.contrib.auth import get_user_model

    # get_or_create: live tests (demo_user, the admin browser test) commit an "alice" that their
    # truncation does not remove, and test order varies (pytest-xdist).
    user, _ = get_user_model().objects.get_or_create(
        username="alice", defaults={"email": "alice@example.com"}
    )
    return user

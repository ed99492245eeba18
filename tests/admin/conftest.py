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

    return get_user_model().objects.create_user("alice", "alice@example.com", None)

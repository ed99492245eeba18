"""A remote service's answer is read with the users' JSON limits (sasproject/json_input.py):
nested 5,000 deep it was a RecursionError in the agent (issue 18); now a transient fault that
says why, like any answer that is not JSON."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agents.faults import TransientFault
from agents.remote import remote_post

from .servers import HostileServer, start_hostile_server


@pytest.fixture
def deep_server() -> Iterator[HostileServer]:
    server = start_hostile_server("deep")
    yield server
    server.stop()


def test_remote_post__answer_nested_too_deep__transient_fault_naming_the_limit(
    settings: Any, deep_server: HostileServer
) -> None:
    settings.SAS = {
        **settings.SAS,
        "REMOTE_URLS": {**settings.SAS["REMOTE_URLS"], "payment": deep_server.url("")},
    }

    with pytest.raises(TransientFault, match="nested more than 32 levels deep"):
        remote_post(service="payment", path="/payment/charge", body={}, idempotency_key="k", timeout=10)

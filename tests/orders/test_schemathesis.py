"""Property-based fuzzing of the API from its own OpenAPI schema (schemathesis): whatever it
generates - valid bodies, and bodies that break the schema - the API never answers 5xx.

In-process over WSGI against the real database, rolled back at the end, as a dedicated user."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode

from .conftest import make_user

EXAMPLES_PER_OPERATION_AND_MODE = 40


@pytest.fixture
def keep_test_transaction() -> Iterator[None]:
    """Requests go straight to the WSGI handler, which would close the database connection at
    the end of each request (and with it the test's transaction): Django's test client turns
    that off the same way."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


def fuzz(schema: Any, token: str, examples: int) -> tuple[Counter[str], Counter[int]]:
    """Every operation of `schema`, `examples` generated requests per operation in each mode
    (bodies that fit the schema, and bodies that break it), each checked for a 5xx. Returns the
    requests per operation and the statuses seen."""
    calls: Counter[str] = Counter()
    statuses: Counter[int] = Counter()

    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis.settings(
                max_examples=examples,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def check(case: Any) -> None:
                response = case.call(headers={"Authorization": f"Token {token}"})
                calls[case.operation.label] += 1
                statuses[response.status_code] += 1
                case.validate_response(response, checks=[not_a_server_error])

            check()

    print(
        f"schemathesis: {sum(calls.values())} requests, statuses {dict(sorted(statuses.items()))}",
        dict(calls),
    )
    return calls, statuses


def test_api_schema__fuzzed_requests__never_a_server_error(db: None, keep_test_transaction: None) -> None:
    from rest_framework.authtoken.models import Token

    from sasproject.wsgi import application

    token = Token.objects.create(user=make_user("fuzz")).key
    # Every operation but the jobs API's (it has its own: tests/jobs/test_schemathesis.py).
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application).exclude(path_regex="^/api/jobs/")

    calls, statuses = fuzz(schema, token, EXAMPLES_PER_OPERATION_AND_MODE)

    # every operation was exercised: the orders' and webhook secret's 6, the run progress and
    # the exports' 4 (issue 9), the report's 1 (its window parameters fuzzed too)
    assert len(calls) == 12, calls
    assert "GET /api/reports/" in calls
    assert not any(code >= 500 for code in statuses)
    assert statuses[201] > 0 and statuses[400] > 0  # it got past validation and was refused by it

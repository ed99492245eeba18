"""The jobs API fuzzed from its own OpenAPI schema (schemathesis), as the orders API is
(tests/orders/test_schemathesis.py): whatever is generated, never a 5xx."""

from __future__ import annotations

import schemathesis

from ..orders.test_schemathesis import fuzz, keep_test_transaction
from .conftest import make_user

__all__ = ["keep_test_transaction"]

# Thirteen operations: fewer examples each than the orders API's six get, for the suite's time.
EXAMPLES_PER_OPERATION_AND_MODE = 6


def test_jobs_api_schema__fuzzed_requests__never_a_server_error(
    db: None, keep_test_transaction: None
) -> None:
    from rest_framework.authtoken.models import Token

    from sasproject.wsgi import application

    token = Token.objects.create(user=make_user("fuzz-jobs")).key
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application).include(path_regex="^/api/jobs/")

    calls, statuses = fuzz(schema, token, EXAMPLES_PER_OPERATION_AND_MODE)

    assert len(calls) == 13, calls  # every operation was exercised
    assert not any(code >= 500 for code in statuses), statuses
    assert statuses[400] > 0 and statuses[404] > 0  # refused by validation; others' ids not found

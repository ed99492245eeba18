"""Every operation of the API fuzzed from its own OpenAPI schema (schemathesis), in one test:
whatever is generated - bodies and parameters that fit the schema, and ones that break it - the
API never answers 5xx, answers only statuses, content types, headers and bodies its schema
declares, and refuses (4xx) every request that breaks the schema (issue 18).

In-process over WSGI against the real database, rolled back at the end, as a dedicated user who
owns a job, an order, a run and an export, so that half the generated ids of the positive cases
are real ones and the operations behind them are reached too.

Bounded in time for `make test`: SAS_FUZZ_EXAMPLES generated requests per operation and mode (8
by default). A bigger run by hand (pytest-timeout stops a test at 300 s unless told otherwise):
`SAS_FUZZ_EXAMPLES=150 .venv/bin/pytest -p no:cacheprovider -s --timeout 2300 \
    tests/sasproject/test_api_schemathesis.py`
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.failures import FailureGroup
from schemathesis.core.parameters import ParameterLocation
from schemathesis.generation import GenerationMode

from ..jobs.conftest import job_body, make_user

pytestmark = pytest.mark.usefixtures("manual_scheduler")

EXAMPLES_PER_OPERATION_AND_MODE = int(os.environ.get("SAS_FUZZ_EXAMPLES", "8"))
# Every operation of /api/schema/: orders 4, webhook secret 2, jobs 13, reports 1, run progress
# 1, a step's output download 1 (issue 28), exports 4, alert rules 4. A new operation that the
# schema does not show fails this count.
OPERATIONS = 30
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(autouse=True)
def _generous_rates(settings: Any) -> None:
    """Rates and quotas out of the way (their 429s have their own tests): the fuzzing reaches
    validation and the created objects, not the limiter."""
    settings.SAS_SUBMIT_RATE = "100000/minute"
    settings.SAS_RATES = {scope: "100000/minute" for scope in settings.SAS_RATES}
    settings.SAS_QUOTAS = {name: 0 for name in settings.SAS_QUOTAS}


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


def _own_objects(user: Any) -> dict[str, str]:
    """Path parameter -> an id the fuzzing user owns (a job, an order and its run, an export)."""
    from exports.services import export_request
    from orders.services import order_submit
    from scheduler.services.jobs import job_create

    body = job_body(name="fuzzed")
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name=body["name"],
        workflow=body["workflow"],
        input=body["input"],
        cron=body["cron"],
        timezone_name=body["timezone"],
    )
    order = order_submit(
        owner_id=user.pk,
        data={"items": [{"sku": "SKU-1", "quantity": 1}], "amount": "5.00", "currency": "EUR"},
        callback_url="",
    )
    export = export_request(owner_id=user.pk)
    return {
        "id": str(job.pk),
        "order_id": str(order.pk),
        "run_id": str(order.run_id),
        "export_id": str(export.pk),
    }


def _use_own_ids(case: Any, own: dict[str, str]) -> None:
    """Half the positive cases (by a hash of the case) get ids the user owns."""
    params = case.path_parameters or {}
    if not params or zlib.crc32(repr(sorted(params.items())).encode()) % 2:
        return
    for name in params:
        if name == "id":
            params[name] = own["order_id"] if "/orders/" in case.path else own["id"]
        elif name in own:
            params[name] = own[name]


def fuzz(
    schema: Any, token: str, examples: int, own: dict[str, str]
) -> tuple[Counter[str], Counter[int], list[str]]:
    """`examples` generated requests per operation in each mode, each response checked. Returns
    the requests per operation, the statuses seen and the failures (one line each)."""
    calls: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    failures: list[str] = []

    def run(operation: Any, mode: GenerationMode) -> None:
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
            if mode is GenerationMode.POSITIVE:
                _use_own_ids(case, own)
            # The user's token, unless the case breaks its headers on purpose (a missing or
            # wrong token: its 401 is the refusal the negative check expects).
            broken_headers = case.meta is not None and case.meta.is_negative_at(ParameterLocation.HEADER)
            headers = {} if broken_headers else {"Authorization": f"Token {token}"}
            case.headers = {**(case.headers or {}), **headers}
            response = case.call()
            calls[case.operation.label] += 1
            statuses[response.status_code] += 1
            try:
                case.validate_response(response, checks=CHECKS, headers=headers)
            except (AssertionError, FailureGroup) as exc:  # every failure, not the first
                found = exc.exceptions if isinstance(exc, FailureGroup) else [exc]
                what = "; ".join(
                    f"{getattr(f, 'title', type(f).__name__)}: {getattr(f, 'message', str(f))}"[:400]
                    for f in found
                )
                failures.append(
                    f"{case.operation.label} {mode.name} -> {response.status_code}: {what} "
                    f"| {case.as_curl_command(headers=headers)[:400]}"
                )

        try:
            check()
        except hypothesis.errors.Unsatisfiable as exc:
            raise AssertionError(f"{operation.label} {mode.name}: {exc}") from None

    for result in schema.get_all_operations():
        # Rotating or revoking the fuzzer's own token would make every later call a 401: those
        # two are tried in tests/sasproject/test_api_tokens.py.
        if result.ok().path.startswith("/api/token/"):
            continue
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            run(result.ok(), mode)

    return calls, statuses, failures


def test_api_schema__every_operation_fuzzed__no_5xx_and_as_the_schema_says(
    db: None, keep_test_transaction: None
) -> None:
    from sasproject.tokens.services import api_token_rotate
    from sasproject.wsgi import application

    user = make_user("fuzz")
    token = api_token_rotate(user_id=user.pk).key
    own = _own_objects(user)
    schema = schemathesis.openapi.from_wsgi("/api/schema/", application)

    calls, statuses, failures = fuzz(schema, token, EXAMPLES_PER_OPERATION_AND_MODE, own)

    print(
        f"\nschemathesis: {sum(calls.values())} requests over {len(calls)} operations, "
        f"statuses {dict(sorted(statuses.items()))}, {len(failures)} failures"
    )
    print("\n".join(f.replace("\n", " ") for f in failures[:50]))
    assert len(calls) == OPERATIONS, sorted(calls)  # every operation was exercised
    assert not failures, "\n".join(failures[:20])
    assert not any(code >= 500 for code in statuses), statuses
    # it got past validation (created things), was refused by it, and reached owned objects
    assert statuses[201] > 0 and statuses[400] > 0 and statuses[200] > 0

"""The OpenAPI schema (/api/schema/, drf-spectacular) says what the API enforces (issue 18):
generated without a warning (two components named `Job` were one), every input that refuses
unknown fields closed, the job numbers' ranges declared, the answers every operation can give."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.generators import SchemaGenerator

from scheduler.services.job_input import (
    CATCHUP_WINDOW_MAX,
    JITTER_MAX,
    MAX_FIRINGS_MAX,
    MAX_RETRY_MAX,
    RETRY_BACKOFF_MAX,
)


@pytest.fixture(scope="module")
def generated() -> tuple[dict[str, Any], dict[str, int], dict[str, int]]:
    """The schema, and the warnings and errors drf-spectacular gave while generating it."""
    GENERATOR_STATS.reset()
    schema = SchemaGenerator().get_schema(request=None, public=True)
    warnings, errors = dict(GENERATOR_STATS._warn_cache), dict(GENERATOR_STATS._error_cache)
    GENERATOR_STATS.reset()
    return schema, warnings, errors


def _components(generated: Any) -> dict[str, Any]:
    return dict(generated[0]["components"]["schemas"])


def test_schema__generated__no_warning_no_error(generated: Any) -> None:
    """A duplicate component name (reports' and jobs' `Job`) is such a warning; so is a view
    drf-spectacular cannot read."""
    _, warnings, errors = generated

    assert not warnings, "\n".join(warnings)
    assert not errors, "\n".join(errors)


def test_schema__job_components__unique_names(generated: Any) -> None:
    components = _components(generated)

    assert "ReportJob" in components and "ReportLastRun" in components
    assert "workflow" in components["Job"]["properties"]  # the jobs API's, not the report's
    assert "schedule" in components["ReportJob"]["properties"]


@pytest.mark.parametrize(
    "component",
    [
        "OrderCreateRequest",
        "ItemRequest",
        "JobWriteRequest",
        "PatchedJobWriteRequest",
        "PauseRequest",
        "BackfillRequest",
    ],
)
def test_schema__inputs_that_refuse_unknown_fields__closed(generated: Any, component: str) -> None:
    assert _components(generated)[component]["additionalProperties"] is False


def test_schema__job_numbers__their_ranges(generated: Any) -> None:
    fields = _components(generated)["JobWriteRequest"]["properties"]

    assert (fields["max_retry"]["minimum"], fields["max_retry"]["maximum"]) == (0, MAX_RETRY_MAX)
    assert (fields["jitter"]["minimum"], fields["jitter"]["maximum"]) == (0, JITTER_MAX)
    assert (fields["max_firings"]["minimum"], fields["max_firings"]["maximum"]) == (1, MAX_FIRINGS_MAX)
    assert fields["catchup_window"]["maximum"] == CATCHUP_WINDOW_MAX.total_seconds()
    assert fields["retry_backoff"]["maximum"] == RETRY_BACKOFF_MAX
    assert fields["retry_backoff"]["exclusiveMinimum"] is True
    assert "/OverlapPolicyEnum" in str(fields["overlap_policy"])  # the enum, by reference
    assert "1970" in fields["start_at"]["description"] and "2999" in fields["start_at"]["description"]


def test_schema__every_operation__its_common_answers(generated: Any) -> None:
    for path, operations in generated[0]["paths"].items():
        for method, operation in operations.items():
            responses = operation["responses"]
            assert "401" in responses, (method, path)
            if method in ("post", "put", "patch"):
                assert {"400", "413"} <= set(responses), (method, path)
            if "{" in path:
                assert "404" in responses, (method, path)
            for parameter in operation.get("parameters", []):
                if parameter["name"] == "page":
                    assert parameter["schema"]["minimum"] == 1, (method, path)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/jobs/null/", "/api/jobs/2%0A%C3%AF/pause/", "/api/nothing-here/"])
def test_api__address_no_route_takes__json_404_as_the_schema_says(path: str) -> None:
    """Not Django's HTML page (with DEBUG on, the one that lists every route); a POST too."""
    response = Client().post(path)

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        (
            "/api/orders/",
            {"items": [{"sku": 42, "quantity": 1}], "amount": "5.00", "currency": "EUR"},
            "items",
        ),
        ("/api/jobs/", {"name": 42, "workflow": "order_fulfilment", "cron": "* * * * *"}, "name"),
    ],
)
def test_api__number_where_a_string_is_declared__400(path: str, body: dict[str, Any], field: str) -> None:
    """DRF's CharField took 42 as "42"; the schema says string (schemathesis found it)."""
    from rest_framework.test import APIClient

    from sasproject.tokens.services import api_token_rotate

    from ..jobs.conftest import make_user

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token_rotate(user_id=make_user('strict').pk).key}")

    response = client.post(path, body, format="json")

    assert response.status_code == 400 and field in response.json(), response.json()

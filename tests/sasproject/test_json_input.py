"""JSON from users (sasproject/json_input.py, issue 18): nested ~1,000 deep (a 2 kB body) was a
RecursionError and a NUL in a string a DataError at the INSERT - both 500s. Now, on every
endpoint that takes a JSON body and in the job form's JSON field: a 400 that says why, and
nothing written. A body over the size limit is a 413."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django import forms
from django.test import Client
from rest_framework.test import APIClient

from orders.models import Order
from sasproject.json_input import JSONFormField, JSONInputError, json_depth, json_parse
from scheduler.services.jobs import job_create

from ..jobs.conftest import ORDER_INPUT, WORKFLOW, _generous_submit_rate, api, job_body, row_counts, user, web
from ..jobs.test_pages import FORM

# The jobs tests' users and clients (a token client, a signed-in page client).
__all__ = ["_generous_submit_rate", "api", "user", "web"]

DEEP = "[" * 1000 + "]" * 1000  # 2 kB
NUL = '"a\\u0000b"'  # the JSON escape: PostgreSQL's jsonb and text refuse it


# -- the parser ----------------------------------------------------------------------------------


def test_json_parse__at_the_depth_limit__read(settings: Any) -> None:
    settings.SAS_JSON_MAX_DEPTH = 4

    assert json_parse('{"a": [[{"b": 1}]]}') == {"a": [[{"b": 1}]]}
    with pytest.raises(JSONInputError, match="more than 4 levels"):
        json_parse('{"a": [[{"b": []}]]}')


def test_json_parse__brackets_inside_strings__do_not_nest() -> None:
    assert json_depth('{"a": "[[[[{{{{", "b": "\\"[["}') == 1
    assert json_parse('{"a": "' + "[" * 5000 + '"}') == {"a": "[" * 5000}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(DEEP, id="deep-arrays"),
        pytest.param('{"a":' * 1000 + "1" + "}" * 1000, id="deep-objects"),
        pytest.param('{"s": ' + NUL + "}", id="nul-in-value"),
        pytest.param('{"a\\u0000": 1}', id="nul-in-key"),
        pytest.param('[["x", ' + NUL + "]]", id="nul-nested"),
        pytest.param('{"n": NaN}', id="nan"),
        pytest.param('{"n": -Infinity}', id="infinity"),
        pytest.param('{"n": 1e400}', id="float-overflow"),
        pytest.param('{"n": ' + "9" * 5000 + "}", id="int-over-digits-limit"),
        pytest.param("{not json", id="not-json"),
        pytest.param(b'{"a": "\xff"}', id="not-utf8"),
    ],
)
def test_json_parse__refused(text: str | bytes) -> None:
    with pytest.raises(JSONInputError):
        json_parse(text)


def test_json_form_field__refused_text__form_error_naming_the_rule() -> None:
    class Form(forms.Form):
        document = JSONFormField()

    deep, nul = Form({"document": DEEP}), Form({"document": '{"s": ' + NUL + "}"})

    assert not deep.is_valid() and "nested more than 32 levels deep" in deep.errors["document"][0]
    assert not nul.is_valid() and "NUL" in nul.errors["document"][0]
    assert Form({"document": '{"ok": [1]}'}).is_valid()


# -- every endpoint that takes a JSON body -------------------------------------------------------


def _owned_job(user: Any) -> int:
    job = job_create(
        by_staff=False, owner_id=user.pk, name="mine", workflow=WORKFLOW, input=ORDER_INPUT, cron="30 2 * * *"
    )
    return int(job.pk)


def _endpoints(job_id: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, a valid body) of every operation that reads a JSON body."""
    return [
        (
            "post",
            "/api/orders/",
            {"items": [{"sku": "S", "quantity": 1}], "amount": "5.00", "currency": "EUR"},
        ),
        ("post", "/api/jobs/", job_body(name="new")),
        ("put", f"/api/jobs/{job_id}/", job_body(name="renamed")),
        ("patch", f"/api/jobs/{job_id}/", {"name": "renamed"}),
        ("post", f"/api/jobs/{job_id}/pause/", {"note": "why"}),
        (
            "post",
            f"/api/jobs/{job_id}/backfill/",
            {"start": "2026-01-01T00:00:00Z", "end": "2026-01-02T00:00:00Z"},
        ),
    ]


def _rows() -> tuple[int, ...]:
    return (*row_counts(), Order.objects.count())


@pytest.mark.django_db
@pytest.mark.usefixtures("manual_scheduler")
@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(DEEP, "nested more than 32 levels deep", id="deep"),
        pytest.param(None, "NUL", id="nul-in-a-string"),
        pytest.param('{"a": NaN}', "NaN", id="nan"),
    ],
)
def test_api__refused_json_body__400_on_every_endpoint_and_nothing_written(
    api: APIClient, user: Any, body: str | None, message: str
) -> None:
    job_id = _owned_job(user)
    api.raise_request_exception = False
    before = _rows()

    for method, path, valid in _endpoints(job_id):
        if body is None:  # the valid body with a NUL in its first string value
            first = next(k for k, v in valid.items() if isinstance(v, str))
            raw = json.dumps({**valid, first: valid[first] + "\x00"})
        else:
            raw = body
        response = getattr(api, method)(path, data=raw, content_type="application/json")

        assert response.status_code == 400, (method, path, response.content[:300])
        assert message in response.json()["detail"], (method, path, response.json())

    assert _rows() == before


@pytest.mark.django_db
def test_api__body_over_the_size_limit__413_and_nothing_written(api: APIClient, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    before = _rows()
    big = job_body(input={**ORDER_INPUT, "card": "x" * 20_000})

    for path in ("/api/jobs/", "/api/orders/"):
        response = api.post(path, data=json.dumps(big), content_type="application/json")

        assert response.status_code == 413, (path, response.content[:300])
        assert "10000 bytes" in response.json()["detail"]
    assert _rows() == before


@pytest.mark.django_db
@pytest.mark.usefixtures("manual_scheduler")
@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(DEEP, "nested more than 32 levels deep", id="deep"),
        pytest.param(json.dumps({**ORDER_INPUT, "card": "tok\x00ok"}), "NUL", id="nul"),
    ],
)
def test_job_form__refused_json_input__form_error_and_nothing_written(
    web: Client, text: str, message: str
) -> None:
    before = _rows()

    response = web.post("/jobs/new/", {**FORM, "input": text})

    assert response.status_code == 400
    assert message in response.context["form"].errors["input"][0]
    assert _rows() == before

"""An `http.call` job whose header httpx cannot send (issue 26, item 7): a value with a character
outside visible ASCII was accepted and then crashed every attempt (UnicodeEncodeError in
agents/egress_http.py), holding the step for its whole window. Now refused at submit - through
the API and the job form - with an error naming the header, and nothing written."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agents.http_call import HTTP_CALL_WORKFLOW

from .conftest import job_body, row_counts
from .test_pages import FORM

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

URL = os.environ["SIMULATOR_URL"] + "/echo/hook"

BAD_HEADERS = [
    pytest.param({"X-Name": "Müller"}, "X-Name", id="latin-1"),
    pytest.param({"X-Name": "токен"}, "X-Name", id="cyrillic"),
    pytest.param({"Authorization": "Bearer \u2028x"}, "Authorization", id="line-separator"),
    pytest.param({"X-Bell": "a\x07b"}, "X-Bell", id="control-character"),
    pytest.param({"X-Del": "a\x7fb"}, "X-Del", id="delete"),
    pytest.param({"X-Pad": " padded"}, "X-Pad", id="leading-space"),
    pytest.param({"X-Émoji": "1"}, "X-Émoji", id="non-token-name"),
]


def _input(headers: dict[str, str]) -> dict[str, Any]:
    return {"method": "POST", "url": URL, "headers": headers, "body": {"n": 1}}


@pytest.mark.parametrize(("headers", "name"), BAD_HEADERS)
def test_api_create__header_not_visible_ascii__400_naming_it_and_nothing_written(
    api: APIClient, headers: dict[str, str], name: str
) -> None:
    before = row_counts()

    response = api.post(
        "/api/jobs/",
        json.dumps(job_body(workflow=HTTP_CALL_WORKFLOW, input=_input(headers))),
        content_type="application/json",
    )

    assert response.status_code == 400, response.content[:300]
    errors = json.dumps(response.json(), ensure_ascii=False)
    assert "headers" in errors and name in errors, errors
    assert row_counts() == before


@pytest.mark.parametrize(("headers", "name"), BAD_HEADERS)
def test_form__header_not_visible_ascii__error_on_input_and_nothing_written(
    web: Client, headers: dict[str, str], name: str
) -> None:
    before = row_counts()

    response = web.post(
        "/jobs/new/", {**FORM, "workflow": HTTP_CALL_WORKFLOW, "input": json.dumps(_input(headers))}
    )

    assert response.status_code == 400
    errors = " ".join(response.context["form"].errors["input"])
    assert "headers" in errors and name in errors, response.context["form"].errors
    assert row_counts() == before


def test_api_create__ascii_header_with_a_tab_and_spaces_inside__accepted(api: APIClient) -> None:
    response = api.post(
        "/api/jobs/",
        json.dumps(job_body(workflow=HTTP_CALL_WORKFLOW, input=_input({"X-List": "a, b\tc"}))),
        content_type="application/json",
    )

    assert response.status_code == 201, response.content[:300]
    assert response.json()["input"]["headers"] == {"X-List": "a, b\tc"}

"""What a job's runs returned, as their owner sees it (issue 28 item 2, scheduler/outputs.py): the
runs API, the progress API, the pages, the download and the history export.

On the real database, with the real agents' code: the test plays the scheduler (claims with
`step_claim_due`, replies with `step_reply`) and the agent (the `http.call` agent's `http_call`
against a real HTTP server in a thread of this process; a `@schedulable` task's `call`), so the
results are exactly what the agents store."""

from __future__ import annotations

import csv
import io
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from celery import shared_task
from django.db import transaction
from django.test import Client
from rest_framework.test import APIClient

from agents.http_call import http_call
from agents.schedulable import schedulable, schedulable_get
from exports.models import ExportFile
from exports.services import export_request
from exports.tasks import history_csv
from scheduler.models import Job, Run, Step
from scheduler.services import step_claim_due, step_reply
from scheduler.services.jobs import job_create, job_run_now
from tests.roles import ROLES, client_of, join_role, staff_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

SCRIPT = "<script>alert('owned')</script>"
# What the remote answers: a JSON body with markup in it, headers kept and headers dropped.
ANSWER_HEADERS = {
    "Content-Type": "application/json",
    "ETag": '"v42"',
    "Location": "https://api.example.com/things/42",
    "Retry-After": "120",
    "Set-Cookie": "session=remote-secret",
    "X-Internal-Token": "remote-secret-2",
}


@shared_task(name="tests.outputs.report")
def report(rows: int = 3, *, note: str = "") -> dict[str, Any]:
    return {"rows": rows, "note": note, "lines": ["é" * 10] * rows}


# Staff-only, as tasks are by default (a customer-schedulable one would be offered on every
# customer's form in this test session): its jobs' owner is an operator.
schedulable(report, label="Report (test)", timeout=5)


class _Remote:
    """A remote service: answers every request with `body` (set by the test) and ANSWER_HEADERS."""

    def __init__(self) -> None:
        remote = self
        self.body = "{}"

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                data = remote.body.encode()
                self.send_response(201)
                for name, value in ANSWER_HEADERS.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def netloc(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def remote(settings: Any) -> Iterator[_Remote]:
    server = _Remote()
    settings.SAS_HTTP_JOB_ALLOWED_HOSTS = [server.netloc]
    settings.SAS_HTTP_JOB_PRIVATE_HOSTS = [server.netloc]
    yield server
    server.stop()


def _claim(run_id: uuid.UUID) -> Any:
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run_id)
    return claim


def _http_job_run(owner: Any, remote: _Remote, body: str) -> tuple[Job, Run]:
    """A customer's http.call job, run now: the agent's call answered by `remote` with `body`,
    its result replied as the agent replies it."""
    remote.body = body
    job = job_create(
        by_staff=False,
        owner_id=owner.pk,
        name="ping",
        workflow="http.call",
        input={"method": "POST", "url": f"http://{remote.netloc}/hook", "body": {"ping": True}},
        cron="0 3 * * *",
        timezone_name="UTC",
    )
    firing = job_run_now(job_id=job.pk, by_staff=False)
    assert firing.run_id is not None
    claim = _claim(firing.run_id)
    step = Step.objects.get(pk=claim.step_id)
    assert step.payload is not None
    result = http_call(payload=step.payload, idempotency_key=step.idempotency_key, timeout=5)
    step_reply(step_id=step.pk, lease=str(claim.lease), outcome="success", result=result, claim_next=False)
    return job, Run.objects.get(pk=firing.run_id)


def _task_job_run(owner: Any, rows: int) -> tuple[Job, Run]:
    """A job of the (staff-only) schedulable task `tests.outputs.report`, its owner made an
    operator, run now by its agent's code."""
    join_role(owner, ROLES["operator"])
    job = job_create(
        by_staff=True,
        owner_id=owner.pk,
        name="report",
        workflow="task:tests.outputs.report",
        input={"kwargs": {"rows": rows, "note": SCRIPT}},
        cron="0 3 * * *",
        timezone_name="UTC",
    )
    firing = job_run_now(job_id=job.pk, by_staff=True)
    assert firing.run_id is not None
    claim = _claim(firing.run_id)
    step = Step.objects.get(pk=claim.step_id)
    task = schedulable_get("tests.outputs.report")
    assert task is not None
    result = task.call(args=[], kwargs=step.payload["kwargs"], idempotency_key=step.idempotency_key)
    step_reply(step_id=step.pk, lease=str(claim.lease), outcome="success", result=result, claim_next=False)
    return job, Run.objects.get(pk=firing.run_id)


def _api(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def _one_output(body: dict[str, Any]) -> dict[str, Any]:
    (output,) = body["outputs"]
    return dict(output)


# -- the schema -----------------------------------------------------------------------------------


def test_schema__runs_and_progress__document_the_outputs(db: None) -> None:
    schema = json.loads(Client().get("/api/schema/", {"format": "json"}).content)

    components = schema["components"]["schemas"]
    output = components["StepOutput"]["properties"]
    wanted = {"kind", "status", "headers", "value", "excerpt", "truncated", "size", "download_url"}
    assert wanted <= set(output)
    assert components["JobRun"]["properties"]["outputs"]["items"]["$ref"].endswith("/StepOutput")
    assert components["RunProgress"]["properties"]["outputs"]["items"]["$ref"].endswith("/StepOutput")
    progress = schema["paths"]["/api/runs/{run_id}/progress/"]["get"]["responses"]["200"]
    assert progress["content"]["application/json"]["schema"]["$ref"].endswith("/RunProgress")
    assert "/api/runs/{run_id}/steps/{step_id}/output/" in schema["paths"]


# -- the API ----------------------------------------------------------------------------------------


def test_runs_and_progress_api__http_call__status_kept_headers_and_body(user: Any, remote: _Remote) -> None:
    job, run = _http_job_run(user, remote, json.dumps({"id": 42, "html": SCRIPT}))
    client = _api(user)

    runs = client.get(f"/api/jobs/{job.pk}/runs/").json()["results"]
    progress = client.get(f"/api/runs/{run.pk}/progress/").json()

    (listed,) = runs
    assert listed["state"] == "completed" and progress["state"] == "completed"
    for output in (_one_output(listed), _one_output(progress)):
        assert output["kind"] == "http" and output["status"] == 201 and output["step"] == "call"
        # The allow-list: what a caller acts on; the remote's cookies and own headers dropped.
        assert output["headers"]["content-type"] == "application/json"
        assert output["headers"]["etag"] == '"v42"' and output["headers"]["retry-after"] == "120"
        assert output["headers"]["location"] == "https://api.example.com/things/42"
        assert "set-cookie" not in output["headers"] and "x-internal-token" not in output["headers"]
        assert json.loads(output["excerpt"]) == {"id": 42, "html": SCRIPT}
        assert output["truncated"] is False and output["value"] is None
        assert output["download_url"] == f"/api/runs/{run.pk}/steps/{Step.objects.get(run=run).pk}/output/"
    assert "remote-secret" not in json.dumps(Step.objects.get(run=run).result)


def test_runs_and_progress_api__schedulable_task__its_return_value(user: Any) -> None:
    job, run = _task_job_run(user, rows=2)
    client = _api(user)

    (listed,) = client.get(f"/api/jobs/{job.pk}/runs/").json()["results"]
    progress = client.get(f"/api/runs/{run.pk}/progress/").json()

    expected = {"rows": 2, "note": SCRIPT, "lines": ["é" * 10, "é" * 10]}
    for output in (_one_output(listed), _one_output(progress)):
        assert output["kind"] == "value" and output["status"] is None and output["headers"] is None
        assert output["value"] == expected and json.loads(output["excerpt"]) == expected
        assert output["truncated"] is False
        assert output["size"] == len(json.dumps(expected, ensure_ascii=False).encode())


def test_excerpt__over_the_bound__cut_on_a_character_and_marked(user: Any, settings: Any) -> None:
    settings.SAS = {**settings.SAS, "OUTPUT_EXCERPT_BYTES": 101}
    job, run = _task_job_run(user, rows=40)  # 40 lines of 10 two-byte characters: over 800 bytes

    (listed,) = _api(user).get(f"/api/jobs/{job.pk}/runs/").json()["results"]
    page = client_of(user).get(f"/jobs/{job.pk}/runs/{run.pk}/").content.decode()

    output = _one_output(listed)
    whole = json.dumps(Step.objects.get(run=run).result, ensure_ascii=False)
    assert output["truncated"] is True and output["value"] is None
    assert output["size"] == len(whole.encode()) > 800
    # At most the bound in bytes, never half a character, and the start of the whole.
    assert len(output["excerpt"].encode()) <= 101 and whole.startswith(output["excerpt"])
    assert len(output["excerpt"].encode()) >= 99
    assert 'data-truncated="true"' in page and "(truncated, " in page and " in all)" in page


def test_agent_cut_value__shown_as_cut_at_the_source(user: Any) -> None:
    job, run = _task_job_run(user, rows=1200)  # over the agent's 16 KiB: it keeps half of it as text

    (listed,) = _api(user).get(f"/api/jobs/{job.pk}/runs/").json()["results"]

    output = _one_output(listed)
    assert Step.objects.get(run=run).result["truncated"] is True
    assert output["source_truncated"] is True and output["truncated"] is True and output["value"] is None
    assert output["excerpt"].startswith('{"rows": 1200')


# -- the download -----------------------------------------------------------------------------------


def test_download__owner_gets_all_of_it__others_and_staff_without_a_role_404(
    user: Any, other_user: Any, remote: _Remote, settings: Any
) -> None:
    settings.SAS = {**settings.SAS, "OUTPUT_EXCERPT_BYTES": 64}
    body = json.dumps({"html": SCRIPT, "pad": "x" * 1000})
    job, run = _http_job_run(user, remote, body)
    url = f"/api/runs/{run.pk}/steps/{Step.objects.get(run=run).pk}/output/"

    mine = client_of(user).get(url)
    by_token = _api(user).get(url)
    theirs = client_of(other_user).get(url)
    no_role = client_of(staff_in("plainstaff", ROLES["no_group"])).get(url)
    read_only = client_of(staff_in("watcher", ROLES["read_only"])).get(url)
    anonymous = Client().get(url)
    wrong_run = client_of(user).get(f"/api/runs/{uuid.uuid4()}/steps/{Step.objects.get(run=run).pk}/output/")

    assert mine.status_code == 200 and mine.content.decode() == body
    assert mine["Content-Type"] == "application/json; charset=utf-8"
    assert mine["Content-Disposition"].startswith("attachment; filename=")
    assert mine["X-Content-Type-Options"] == "nosniff" and "no-store" in mine["Cache-Control"]
    assert by_token.status_code == 200 and by_token.content == mine.content
    assert theirs.status_code == 404 and no_role.status_code == 404 and wrong_run.status_code == 404
    assert read_only.status_code == 200 and read_only.content == mine.content
    assert anonymous.status_code in (401, 403) and body.encode() not in anonymous.content
    # Nor through the other answers: their job, its runs, the run's progress and page are not found.
    stranger = _api(other_user)
    assert stranger.get(f"/api/jobs/{job.pk}/runs/").status_code == 404
    assert stranger.get(f"/api/runs/{run.pk}/progress/").status_code == 404
    assert client_of(other_user).get(f"/jobs/{job.pk}/runs/{run.pk}/").status_code == 404


def test_download__html_answer__served_as_plain_text_attachment(user: Any, remote: _Remote) -> None:
    # The remote says text/html: the download never does (it would render on our origin).
    ANSWER_HEADERS["Content-Type"] = "text/html"
    try:
        _, run = _http_job_run(user, remote, SCRIPT)
    finally:
        ANSWER_HEADERS["Content-Type"] = "application/json"

    got = client_of(user).get(f"/api/runs/{run.pk}/steps/{Step.objects.get(run=run).pk}/output/")

    assert got["Content-Type"] == "text/plain; charset=utf-8" and got.content.decode() == SCRIPT
    assert got["Content-Disposition"].startswith("attachment;") and got["X-Content-Type-Options"] == "nosniff"


# -- the pages ----------------------------------------------------------------------------------------


def test_run_page_and_job_page__script_body__escaped(user: Any, remote: _Remote) -> None:
    job, run = _http_job_run(user, remote, json.dumps({"html": SCRIPT}))
    web = client_of(user)

    run_page = web.get(f"/jobs/{job.pk}/runs/{run.pk}/").content.decode()
    job_page = web.get(f"/jobs/{job.pk}/").content.decode()

    for html in (run_page, job_page):
        assert SCRIPT not in html and "alert(&#x27;owned&#x27;)" in html
        assert "&lt;script&gt;" in html
    assert 'id="outputs"' in run_page and "HTTP 201" in run_page and "&quot;v42&quot;" in run_page
    assert f"/api/runs/{run.pk}/steps/" in run_page


# -- the export ---------------------------------------------------------------------------------------


def test_history_export__the_outputs_in_an_output_column(user: Any, remote: _Remote, settings: Any) -> None:
    settings.SAS = {**settings.SAS, "EXPORT_MIN_SECONDS": 0.0}
    _http_job_run(user, remote, json.dumps({"id": 7}))
    _task_job_run(user, rows=1)
    export = export_request(owner_id=user.pk)
    assert export.run is not None
    claim = _claim(export.run.pk)
    history_csv.perform_long(**claim.message())

    content = ExportFile.objects.get(export=export).content
    rows = list(csv.DictReader(io.StringIO(content)))

    outputs = {r["workflow"]: r["output"] for r in rows if r["status"] == "succeeded" and r["output"]}
    head, body = outputs["http.call"].split("\n\n", 1)
    lines = head.split("\n")
    assert lines[0] == "HTTP 201" and body == '{"id": 7}'
    assert {"content-type: application/json", 'etag: "v42"', "retry-after: 120"} <= set(lines)
    assert json.loads(outputs["task:tests.outputs.report"])["note"] == SCRIPT
    assert all(r["output"] == "" for r in rows if r["status"] != "succeeded")

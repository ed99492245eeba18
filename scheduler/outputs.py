"""What a run's steps produced, as their owner sees it (issue 28, "Results customers see").

A step's result is stored by its agent in `Step.result` (jsonb): a `@schedulable` task's return
value (cut by the agent to 16 KiB: `{"truncated": true, "text": ...}`), an `http.call`'s answer
(`{"status", "content_type", "headers", "body", "body_truncated"}`, the body cut by the agent to
SAS_HTTP_JOBS["RESPONSE_MAX_BYTES"]). Here, once, for the run page, the job's runs (page and
API), the progress API, the download and the history export:

- `output_data`: the output as shown - its kind (StepDef.output: "value" or "http"), for an HTTP
  answer its status and the stored (allow-listed) headers, and an excerpt of at most
  SAS["OUTPUT_EXCERPT_BYTES"] bytes of UTF-8 with `truncated` (the excerpt is cut here: the
  download has the rest), `size` (bytes of the whole stored text) and `source_truncated` (the
  agent kept only the beginning of a longer answer or value).
- `output_download`: the whole stored output as a file - text/plain, or application/json when it
  is JSON; never the remote's own content type (an HTML body must not render on our origin).

Who may read them: the run's owner, and staff holding OUTPUT_PERMISSION (the read-only operator
role has it); anyone else is told the run does not exist (404). The text is the remote's or the
task's, attacker-controlled: pages autoescape it, downloads are attachments with nosniff.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.urls import reverse

from .models import Run, Step
from .permissions import staff_may
from .workflows import WorkflowInputError, get_workflow

# Staff who may read any run's step outputs (what a step received and returned): the operator
# roles' view permission on steps (ops/roles.py gives it to both roles); not bare is_staff.
OUTPUT_PERMISSION = "scheduler.view_step"
# Columns read for an output (the rest of a step row is not needed).
_OUTPUT_COLUMNS = ("id", "run_id", "name", "seq", "kind", "result")


def output_excerpt_bytes() -> int:
    return int(settings.SAS["OUTPUT_EXCERPT_BYTES"])


def _cut(text: str, limit: int) -> tuple[str, bool]:
    """The first `limit` bytes of `text` as UTF-8 (never half a character), and whether it was cut."""
    data = text.encode()
    if len(data) <= limit:
        return text, False
    return data[:limit].decode(errors="ignore"), True


def _output_kind(workflow: str, step_name: str) -> str:
    try:
        return get_workflow(workflow).step(step_name).output
    except (WorkflowInputError, KeyError):  # a workflow or step no longer registered
        return "value"


def _label(workflow: str, step_name: str) -> str:
    try:
        return get_workflow(workflow).step_label(step_name)
    except WorkflowInputError:
        return step_name


def _is_http_answer(result: Any) -> bool:
    return isinstance(result, dict) and isinstance(result.get("body"), str) and "status" in result


def _agent_cut_value(result: Any) -> bool:
    """A task's value the agent cut (agents.schedulable.result_jsonable): {"truncated", "text"}."""
    return isinstance(result, dict) and set(result) == {"truncated", "text"} and result["truncated"] is True


@dataclass(frozen=True)
class _Full:
    kind: str
    text: str
    json: bool
    source_truncated: bool
    status: int | None = None
    headers: dict[str, str] | None = None


def _full(*, workflow: str, step_name: str, result: Any) -> _Full:
    """The whole stored output as text, and what it is."""
    if _output_kind(workflow, step_name) == "http" and _is_http_answer(result):
        headers = result.get("headers")
        if not isinstance(headers, dict):  # stored before the headers were kept
            headers = {"content-type": str(result["content_type"])} if result.get("content_type") else {}
        content_type = str(headers.get("content-type", "")).split(";")[0].strip().lower()
        status = result.get("status")
        return _Full(
            kind="http",
            text=result["body"],
            json=content_type == "application/json" or content_type.endswith("+json"),
            source_truncated=bool(result.get("body_truncated")),
            status=status if isinstance(status, int) else None,
            # By name: jsonb keeps no order of its own.
            headers={str(k): str(v) for k, v in sorted(headers.items())},
        )
    if _agent_cut_value(result):
        return _Full(kind="value", text=str(result["text"]), json=False, source_truncated=True)
    return _Full(kind="value", text=json.dumps(result, ensure_ascii=False), json=True, source_truncated=False)


def output_data(step: Step, *, workflow: str) -> dict[str, Any]:
    """A step's output as the pages and the API show it (StepOutputSerializer): bounded to
    SAS["OUTPUT_EXCERPT_BYTES"] of excerpt, whatever was stored."""
    full = _full(workflow=workflow, step_name=step.name, result=step.result)
    excerpt, cut = _cut(full.text, output_excerpt_bytes())
    return {
        "step": step.name,
        "label": _label(workflow, step.name),
        "kind": full.kind,
        "status": full.status,
        "headers": full.headers,
        # The task's value itself, for API clients, when it is whole and small enough to show.
        "value": step.result if full.kind == "value" and full.json and not cut else None,
        "excerpt": excerpt,
        "truncated": cut,
        "size": len(full.text.encode()),
        "source_truncated": full.source_truncated,
        "download_url": reverse("api-step-output", args=[step.run_id, step.pk]),
    }


def steps_outputs(*, run: Run, steps: Iterable[Step]) -> list[dict[str, Any]]:
    """The outputs of `run`'s forward steps that returned something, in step order, from its
    steps as the caller read them (the run page and the progress API read a run's steps once,
    for everything they show). Unscoped: for callers that checked the run is the user's."""
    done = [s for s in steps if s.kind == Step.Kind.FORWARD and s.result is not None]
    return [output_data(s, workflow=run.workflow) for s in sorted(done, key=lambda s: s.seq)]


def runs_outputs(*, owner_id: int, runs: Iterable[Run]) -> dict[uuid.UUID, list[dict[str, Any]]]:
    """The outputs of a page of the owner's runs (as `steps_outputs`), in one query
    (step_run_seq_unique): run id -> its outputs (a run of someone else's is left out, whatever
    the caller passed)."""
    workflows = {r.pk: r.workflow for r in runs}
    found: dict[uuid.UUID, list[dict[str, Any]]] = {pk: [] for pk in workflows}
    if not workflows:
        return found
    steps = Step.objects.filter(
        run_id__in=list(workflows), run__owner_id=owner_id, kind=Step.Kind.FORWARD, result__isnull=False
    )
    for step in steps.only(*_OUTPUT_COLUMNS).order_by("run_id", "seq"):
        found[step.run_id].append(output_data(step, workflow=workflows[step.run_id]))
    return found


def output_visible(*, user: Any, run: Run) -> bool:
    """The one rule: a run's step outputs are its owner's, and staff's with OUTPUT_PERMISSION."""
    if not getattr(user, "is_authenticated", False):
        return False
    return bool(run.owner_id is not None and run.owner_id == user.pk) or staff_may(user, OUTPUT_PERMISSION)


@dataclass(frozen=True)
class OutputFile:
    content: str
    content_type: str
    filename: str


def output_download(*, user: Any, run_id: uuid.UUID, step_id: int) -> OutputFile | None:
    """The whole stored output of step `step_id` of run `run_id` as a file, for someone
    `output_visible` allows; None otherwise, and for a step that returned nothing (a 404 that
    does not confirm the run exists)."""
    run = Run.objects.filter(pk=run_id).only("id", "owner_id", "workflow").first()
    if run is None or not output_visible(user=user, run=run):
        return None
    step = Step.objects.filter(pk=step_id, run_id=run.pk, result__isnull=False).only(*_OUTPUT_COLUMNS).first()
    if step is None:
        return None
    full = _full(workflow=run.workflow, step_name=step.name, result=step.result)
    if full.kind == "value" and full.json:
        text = json.dumps(step.result, ensure_ascii=False, indent=2)
    else:
        text = full.text
    extension, content_type = ("json", "application/json") if full.json else ("txt", "text/plain")
    return OutputFile(
        content=text,
        content_type=f"{content_type}; charset=utf-8",
        filename=f"run-{run.pk}-{step.name}.{extension}",
    )


def output_export_text(*, workflow: str, step_name: str, result: Any) -> str:
    """The whole output as one text cell (the history export): the HTTP status and headers, then
    the body; or the value's JSON."""
    if result is None:
        return ""
    full = _full(workflow=workflow, step_name=step_name, result=result)
    if full.kind != "http":
        return full.text
    head = [f"HTTP {full.status}"] + [f"{k}: {v}" for k, v in (full.headers or {}).items()]
    return "\n".join([*head, "", full.text])

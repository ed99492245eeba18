"""The job form, one for the web pages and the admin.

It parses what a person typed (JSON, numbers, date-times in the job's time zone) and nothing
more: every rule - the cron expression, the time zone, the ranges, end after start, the
workflow's own input checks - is the job service's (`job_create` / `job_update`), whose
`WorkflowInputError` comes back on the fields (`job_save`). A refused form writes nothing.

Who may schedule what too: the form is made for a person (`staff=`: are they staff?), offers
only the workflows they may pick (`workflows_permitted`), each with its description and an
example input, and passes `by_staff` to the services, which refuse anything else (a forged
POST) with an error on `workflow`.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from django import forms
from django.utils import timezone

from alerting.models import CUSTOMER_RULE_KINDS
from sasproject.json_input import JSONFormField
from sasproject.names import control_characters_refuse
from scheduler.dispatcher.cron import zone_error
from scheduler.dispatcher.selectors import job_edges, job_ids_by_name
from scheduler.limits import (
    CUSTOMER_PRIORITY_DEFAULT,
    CUSTOMER_PRIORITY_MAX,
    CUSTOMER_PRIORITY_MIN,
    LimitExceeded,
)
from scheduler.models import Job, OverlapPolicy
from scheduler.services.job_input import CATCHUP_WINDOW_MAX, CATCHUP_WINDOW_MESSAGE
from scheduler.services.jobs import job_create, job_update
from scheduler.workflows import Workflow, WorkflowInputError, workflows_permitted

from .errors import FIELD_TO_SERVICE, input_messages, split_errors

ONCE, RECURRING = "once", "recurring"
KIND_CHOICES = [(RECURRING, "On a schedule (cron)"), (ONCE, "Once")]

# Date-times are typed and shown in the job's own time zone.
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"
TIME_FIELDS = ("run_at", "start_at", "end_at")
SECONDS_FIELDS = ("retry_backoff", "catchup_window")

# What a job is made of, in the order the form shows it (the service's keywords but `timezone`).
JOB_WHAT = ("name", "workflow", "input")
JOB_WHEN = ("cron", "timezone", "run_at", "start_at", "end_at", "max_firings")
JOB_OVERLAPS = (
    "overlap_policy",
    "catchup_window",
    "jitter",
    "max_retry",
    "retry_backoff",
    "priority",
    "idempotent",
)
JOB_FIELDS: tuple[str, ...] = (*JOB_WHAT, *JOB_WHEN, *JOB_OVERLAPS)


@lru_cache(maxsize=1)
def time_zone_names() -> list[str]:
    """IANA zone names for the time zone field's suggestions (the service checks the value)."""
    return sorted(available_timezones())


# The form's first choice when it offers it: a customer's workflow (not, say, a reprice).
DEFAULT_WORKFLOW = "http.call"
STAFF_ONLY_MARK = "staff only"


def _choice_label(workflow: Workflow) -> str:
    label = workflow.label if workflow.label and workflow.label != workflow.name else ""
    text = f"{label} ({workflow.name})" if label else workflow.name
    return text if workflow.customer_schedulable else f"{text} - {STAFF_ONLY_MARK}"


def workflow_choices(*, staff: bool) -> list[tuple[str, str]]:
    """The workflows a person may pick - customers: the customer-schedulable ones; staff: every
    one, staff-only work marked so: "Label (name)"."""
    return [(w.name, _choice_label(w)) for w in workflows_permitted(staff=staff)]


def workflow_hint(workflow: Workflow) -> dict[str, str]:
    """What a workflow does, the input it takes (from its description and input schema, where
    it has them) and an example input (JSON text, "" when it has none)."""
    schema = workflow.input_schema or {}
    required = set(schema.get("required") or ())
    fields = [key if key in required else f"{key} (optional)" for key in (schema.get("properties") or {})]
    parts = [workflow.description]
    if fields:
        parts.append(f"Input: {', '.join(fields)}.")
    if not workflow.customer_schedulable:
        parts.append("Staff only.")
    example = "" if workflow.input_example is None else json.dumps(workflow.input_example, indent=2)
    return {"text": " ".join(p for p in parts if p), "example": example}


def workflow_hints(*, staff: bool) -> dict[str, dict[str, str]]:
    """`workflow_hint` of each workflow the person may pick: shown under the workflow select."""
    return {w.name: workflow_hint(w) for w in workflows_permitted(staff=staff)}


def _local_input(attrs: dict[str, str] | None = None) -> forms.DateTimeInput:
    return forms.DateTimeInput(attrs={"type": "datetime-local", **(attrs or {})}, format=LOCAL_FORMAT)


class JobForm(forms.ModelForm):
    """A job's fields. `kind` chooses between a cron schedule and a single run; the fields of
    the other kind are ignored. Numbers are plain numbers (seconds for durations) and reach the
    service as typed, so a negative retry count gets the service's message, not a browser's."""

    kind = forms.ChoiceField(label="Runs", choices=KIND_CHOICES, initial=RECURRING, widget=forms.RadioSelect)
    name = forms.CharField(
        label="Name",
        max_length=200,
        validators=[control_characters_refuse],
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )
    # A text field shown as a select of what the person may pick: a name that is not offered
    # (a forged POST) reaches the job service, whose error says why it is refused.
    workflow = forms.CharField(
        label="Workflow",
        max_length=100,
        help_text="What each run does: one of the workflows you may schedule.",
        widget=forms.Select(),
    )
    input = JSONFormField(
        label="Input (JSON object)",
        initial=dict,
        # Not required: Django counts {} as empty, and a workflow that takes no input must save
        # with it (empty means {}; the workflow says whether that is enough).
        required=False,
        help_text="The workflow's input; checked by the workflow when you save.",
        widget=forms.Textarea(attrs={"rows": 6, "class": "mono", "spellcheck": "false"}),
    )
    cron = forms.CharField(
        label="Cron expression",
        required=False,
        help_text="Five fields: minute hour day-of-month month day-of-week (e.g. 30 2 * * 1-5), "
        "or @hourly, @daily, @weekly, @monthly, @yearly.",
        widget=forms.TextInput(attrs={"class": "mono", "autocomplete": "off", "placeholder": "*/5 * * * *"}),
    )
    timezone = forms.CharField(
        label="Time zone",
        initial="UTC",
        help_text="IANA name (Europe/Paris). The schedule and the times below are read in it.",
        widget=forms.TextInput(attrs={"list": "tz-names", "autocomplete": "off"}),
    )
    run_at = forms.DateTimeField(
        label="Run at", required=False, help_text="Empty: as soon as it is saved.", widget=_local_input()
    )
    start_at = forms.DateTimeField(
        label="Not before", required=False, help_text="No run before this time.", widget=_local_input()
    )
    end_at = forms.DateTimeField(
        label="Not after", required=False, help_text="No run after this time.", widget=_local_input()
    )
    max_firings = forms.IntegerField(
        label="Stop after", required=False, help_text="This many scheduled runs (empty: no limit)."
    )
    overlap_policy = forms.ChoiceField(
        label="If the previous run is still going",
        choices=OverlapPolicy.choices,
        initial=OverlapPolicy.SKIP,
    )
    catchup_window = forms.IntegerField(
        label="Catch-up window (seconds)",
        required=False,
        help_text="After downtime, runs missed within this window still happen, oldest first "
        "(empty: only the latest missed one).",
    )
    jitter = forms.IntegerField(
        label="Jitter (seconds)", initial=0, help_text="Each run starts up to this much later (spreads load)."
    )
    max_retry = forms.IntegerField(
        label="Retries", initial=0, help_text="New attempts of a run that failed or was undone."
    )
    retry_backoff = forms.FloatField(
        label="Retry delay (seconds)", initial=10, help_text="Before the first retry; doubles each time."
    )
    priority = forms.IntegerField(
        label="Priority",
        initial=CUSTOMER_PRIORITY_DEFAULT,
        help_text=f"Higher runs first: {CUSTOMER_PRIORITY_MIN} to {CUSTOMER_PRIORITY_MAX}. Jobs run below "
        "system work (orders, exports: 0; webhook deliveries: -1).",
    )
    idempotent = forms.BooleanField(
        label="Safe to run twice at once (idempotent)",
        required=False,
        initial=True,
        help_text="Untick if two runs of this job must never overlap, whatever the policy.",
    )

    # Per workflow: what it does, what input it takes, an example (the page shows the chosen one's).
    workflow_hints: dict[str, dict[str, str]]
    # Whether the person filling it in is staff: what it offers, and what the services allow.
    # Set by the constructor's `staff=` (the pages) or on the class (the admin's get_form).
    staff: bool | None = None
    # What the last `job_save` of an existing job changed: {field: (old, new)} (for the admin's log).
    changes: dict[str, Any]
    # Who saves it (the view sets it): an edit's operator row in the job's history names them.
    actor: str = ""
    # The last `job_save` was refused by a quota (the page answers 429, not 400).
    refused_by_limit: bool = False
    # Issue 30: not a model field - the job service writes the edges (`job_parents_set`).
    parents = forms.CharField(
        label="Waits for",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="Other jobs of yours this one runs after, one per line: the job's name, then "
        "optionally \u201c: on failure\u201d or \u201c: on either\u201d (default: on success). It runs for "
        "their occurrence's time once every one has ended so. Leave Runs on \u201conce\u201d with no "
        "time to run it only after them.",
    )

    class Meta:
        model = Job
        fields = JOB_FIELDS

    def __init__(self, *args: Any, staff: bool | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if staff is not None:
            self.staff = staff
        if self.staff is None:
            raise TypeError("JobForm needs staff=True/False: who fills it in decides what it offers")
        choices = workflow_choices(staff=self.staff)
        self.workflow_hints = workflow_hints(staff=self.staff)
        job = self.instance
        # A value this person may not pick - a job of work that is staff-only now, or a forged
        # POST shown again with its error - is shown as it is, marked, so the select does not
        # quietly switch to another workflow; saving it is refused by the service.
        current = str(self.data.get(self.add_prefix("workflow")) or "") if self.is_bound else job.workflow
        if current and current not in self.workflow_hints:
            choices.insert(0, (current, f"{current} - {STAFF_ONLY_MARK}, not available to you"))
        widget = self.fields["workflow"].widget
        assert isinstance(widget, forms.Select)
        widget.choices = choices
        if job.pk is None and not self.is_bound:
            names = [name for name, _ in choices]
            self.initial.setdefault("workflow", DEFAULT_WORKFLOW if DEFAULT_WORKFLOW in names else names[0])
        if job.pk is None:
            return
        # The stored job as the person typed it: kind, seconds, times in its own zone.
        zone = zone_or_none(job.timezone) or ZoneInfo("UTC")
        self.initial["kind"] = RECURRING if job.is_recurring else ONCE
        for name in SECONDS_FIELDS:
            value = getattr(job, name)
            self.initial[name] = None if value is None else _seconds_text(value)
        for name in TIME_FIELDS:
            value = getattr(job, name)
            self.initial[name] = None if value is None else value.astimezone(zone).replace(tzinfo=None)
        self.initial["input"] = job.input
        self.initial["parents"] = parents_text(job_edges(owner_id=job.owner_id, job_id=job.pk)["parents"])

    def clean_catchup_window(self) -> int | None:
        """Bounded before it becomes a timedelta (`timedelta(seconds=1e20)` overflowed: a 500),
        with the service's message."""
        value: int | None = self.cleaned_data.get("catchup_window")
        if value is not None and not 0 <= value <= CATCHUP_WINDOW_MAX.total_seconds():
            raise forms.ValidationError(CATCHUP_WINDOW_MESSAGE)
        return value

    def _post_clean(self) -> None:
        """No model validation: the job service is the one validator (`job_save`)."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        # Times were typed in the job's zone; Django read them in the site's. Re-read them.
        zone = zone_or_none(cleaned.get("timezone") or "")
        for name in TIME_FIELDS:
            value = cleaned.get(name)
            if isinstance(value, datetime) and zone is not None:
                cleaned[name] = timezone.make_naive(value).replace(tzinfo=zone)
        return cleaned

    def service_fields(self) -> dict[str, Any]:
        """The cleaned fields as the job service's keywords."""
        data = self.cleaned_data
        fields: dict[str, Any] = {}
        for name in JOB_FIELDS:
            value = data.get(name)
            if name in SECONDS_FIELDS and value is not None:
                value = float(value) if name == "retry_backoff" else timedelta(seconds=value)
            fields[FIELD_TO_SERVICE.get(name, name)] = value
        fields["recurring"] = data.get("kind") != ONCE
        if data.get("kind") == ONCE:
            fields["cron"] = ""
            # A job that runs once has no schedule to bound, catch up on or spread.
            fields.update(start_at=None, end_at=None, max_firings=None, catchup_window=None, jitter=0)
        else:
            fields["cron"] = (fields.get("cron") or "").strip()
            fields["run_at"] = None
        if fields.get("input") is None:
            fields["input"] = {}
        return fields

    def add_service_errors(self, exc: WorkflowInputError) -> None:
        """The service's messages on the fields they are about; the workflow's on `input`."""
        own, about_input = split_errors(exc.errors, set(self.fields))
        for field, messages in own.items():
            for message in messages:
                self.add_error(field, message)
        for message in input_messages(about_input):
            self.add_error("input", message)


def zone_or_none(name: str) -> ZoneInfo | None:
    """The IANA zone `name`, or None when the job service would refuse it."""
    return None if zone_error(name) else ZoneInfo(name)


def _seconds_text(value: timedelta) -> int | float:
    seconds = value.total_seconds()
    return int(seconds) if seconds == int(seconds) else seconds


def job_save(form: JobForm, *, owner_id: int | None = None) -> Job | None:
    """Validate the form, then create or update its job (`job_write`). Returns the job, or None
    with the errors on the form (nothing written)."""
    if not form.is_valid():
        return None
    return job_write(form, owner_id=owner_id)


def job_write(form: JobForm, *, owner_id: int | None = None) -> Job | None:
    """Create (no instance yet: `owner_id` owns it) or update the job of a cleaned form through
    the job service, as the form's person (`form.staff`). Returns the job, or None with the
    service's errors on the form."""
    fields = form.service_fields()
    by_staff = bool(form.staff)
    try:
        owner = form.instance.owner_id if form.instance.pk is not None else owner_id
        if "parents" in form.fields and owner is not None:
            fields["parents"] = parents_from_text(form.cleaned_data.get("parents") or "", owner_id=owner)
        if form.instance.pk is None:
            if owner_id is None:
                raise WorkflowInputError({"owner": "a job needs an owner"})
            return job_create(owner_id=owner_id, by_staff=by_staff, **fields)
        edit = job_update(job_id=form.instance.pk, by_staff=by_staff, actor=form.actor, **fields)
    except WorkflowInputError as exc:
        form.add_service_errors(exc)
        return None
    except LimitExceeded as exc:
        form.add_error(None, exc.message)
        form.refused_by_limit = True
        return None
    form.changes = dict(edit.changed)
    return edit.job


# ---------------------------------------------------------------------------------------------
# The job's alert rules (issue 21, seed 004 per-user alerting)
# ---------------------------------------------------------------------------------------------

# What each kind a customer may pick means, in the form's words (the kinds are the alerting
# service's, CUSTOMER_RULE_KINDS).
ALERT_RULE_KIND_TEXT = {
    "job_failure_rate": "Failure rate: this share of runs failed in the window",
    "job_consecutive_failures": "Consecutive failures: the last N runs all failed",
    "job_missed_runs": "Missed runs: a run due this many seconds ago has not started",
}
ALERT_RULE_KIND_CHOICES = [(k.value, ALERT_RULE_KIND_TEXT.get(k.value, k.label)) for k in CUSTOMER_RULE_KINDS]


class AlertRuleForm(forms.Form):
    """Parses what the customer typed into the types the rule service takes; every rule - the
    limits per kind, the channel, the webhook URL's egress policy, the per-user cap - is
    `alerting.customer.customer_rule_create`'s, whose field errors come back on these fields."""

    kind = forms.ChoiceField(label="Alert when", choices=ALERT_RULE_KIND_CHOICES)
    threshold = forms.FloatField(
        label="Threshold",
        help_text="Failure rate: a fraction, 0.01 to 1 (0.5 = half the runs). Consecutive failures: "
        "a number of runs, 1 to 100. Missed runs: seconds late, 60 to 604800.",
        widget=forms.NumberInput(attrs={"step": "any"}),
    )
    min_runs = forms.IntegerField(
        label="At least this many runs",
        initial=1,
        help_text="Failure rate only: fewer runs in the window never alert (1 to 10000).",
    )
    window_minutes = forms.IntegerField(
        label="Window (minutes)", initial=60, help_text="Failure rate only: 1 to 10080 (a week)."
    )
    notify_email = forms.BooleanField(
        label="E-mail me (to my account's address)", required=False, initial=True
    )
    webhook_url = forms.CharField(
        label="Webhook URL (optional)",
        required=False,
        max_length=500,
        help_text="An https:// address on the public internet (other addresses are refused); "
        "each alert is signed with your webhook secret and carries an event id.",
        widget=forms.URLInput(attrs={"placeholder": "https://example.com/alerts"}),
    )
    name = forms.CharField(
        label="Name (optional)",
        required=False,
        max_length=100,
        validators=[control_characters_refuse],
        help_text="Shown in the alert and its e-mails' subject.",
    )

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        """The rule service's errors on their fields; the job's (not yours, the cap) on top."""
        for field, messages in errors.items():
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


CONDITION_WORDS = {"on success": "on_success", "on failure": "on_failure", "on either": "on_either"}


def parents_text(edges: list[dict[str, Any]]) -> str:
    """A job's parents as the form shows them: "name" (on success) or "name: on failure"."""
    words = {v: k for k, v in CONDITION_WORDS.items()}
    return "\n".join(
        e["name"] if e["condition"] == "on_success" else f"{e['name']}: {words[e['condition']]}"
        for e in edges
    )


def parents_from_text(text: str, *, owner_id: int) -> list[dict[str, Any]]:
    """The form's lines as the service's `parents` ([{"job": id, "condition": ...}]): each a
    job's name (or #id) of the owner, then optionally ": on failure" / ": on either". Raises
    WorkflowInputError on `parents` for a name that is none of the owner's jobs; the rest
    (cycles, staff-only work) is the service's to refuse."""
    wanted: list[tuple[str, str]] = []
    errors: list[str] = []
    for line in filter(None, (raw.strip() for raw in text.splitlines())):
        head, sep, tail = line.rpartition(":")
        word = " ".join(tail.lower().split())
        if sep and word in CONDITION_WORDS:
            wanted.append((head.strip(), CONDITION_WORDS[word]))
        else:  # a name may hold a colon: only a known condition after the last one is read as one
            wanted.append((line, "on_success"))
    ids = job_ids_by_name(owner_id=owner_id, names=[n for n, _ in wanted])
    parents = []
    for name, condition in wanted:
        if name not in ids:
            errors.append(f"you have no job named {name!r}")
        else:
            parents.append({"job": ids[name], "condition": condition})
    if errors:
        raise WorkflowInputError({"parents": errors})
    return parents

"""The job form, one for the web pages and the admin.

It parses what a person typed (JSON, numbers, date-times in the job's time zone) and nothing
more: every rule - the cron expression, the time zone, the ranges, end after start, the
workflow's own input checks - is the job service's (`job_create` / `job_update`), whose
`WorkflowInputError` comes back on the fields (`job_save`). A refused form writes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from django import forms
from django.utils import timezone

from scheduler.cron import zone_error
from scheduler.models import Job, OverlapPolicy
from scheduler.services.jobs import job_create, job_update
from scheduler.workflows import WorkflowInputError, get_workflow, registered_workflows

from .errors import FIELD_TO_SERVICE, input_messages, split_errors

ONCE, RECURRING = "once", "recurring"
KIND_CHOICES = [(RECURRING, "On a schedule (cron)"), (ONCE, "Once")]

# Date-times are typed and shown in the job's own time zone.
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"
TIME_FIELDS = ("run_at", "start_at", "end_at")
SECONDS_FIELDS = ("retry_backoff", "catchup_window")

# What a job is made of, in the order the form shows it (the service's keywords but `timezone`).
JOB_FIELDS: tuple[str, ...] = (
    "name",
    "workflow",
    "input",
    "cron",
    "timezone",
    "run_at",
    "start_at",
    "end_at",
    "max_firings",
    "overlap_policy",
    "catchup_window",
    "jitter",
    "max_retry",
    "retry_backoff",
    "priority",
    "idempotent",
)


@lru_cache(maxsize=1)
def time_zone_names() -> list[str]:
    """IANA zone names for the time zone field's suggestions (the service checks the value)."""
    return sorted(available_timezones())


def workflow_choices() -> list[tuple[str, str]]:
    """Every registered workflow (orders, schedulable tasks, HTTP calls...): "Label (name)"."""
    choices = []
    for name in registered_workflows():
        label = str(getattr(get_workflow(name), "label", "") or "")
        choices.append((name, f"{label} ({name})" if label and label != name else name))
    return choices


def workflow_hints() -> dict[str, str]:
    """What each workflow does and the input it takes, from its definition (its description and
    input schema, where it has them): shown under the workflow select."""
    hints = {}
    for name in registered_workflows():
        workflow = get_workflow(name)
        schema = getattr(workflow, "input_schema", None) or {}
        required = set(schema.get("required") or ())
        fields = [key if key in required else f"{key} (optional)" for key in (schema.get("properties") or {})]
        parts = [str(getattr(workflow, "description", "") or "")]
        if fields:
            parts.append(f"Input: {', '.join(fields)}.")
        hints[name] = " ".join(p for p in parts if p)
    return hints


def _local_input(attrs: dict[str, str] | None = None) -> forms.DateTimeInput:
    return forms.DateTimeInput(attrs={"type": "datetime-local", **(attrs or {})}, format=LOCAL_FORMAT)


class JobForm(forms.ModelForm):
    """A job's fields. `kind` chooses between a cron schedule and a single run; the fields of
    the other kind are ignored. Numbers are plain numbers (seconds for durations) and reach the
    service as typed, so a negative retry count gets the service's message, not a browser's."""

    kind = forms.ChoiceField(label="Runs", choices=KIND_CHOICES, initial=RECURRING, widget=forms.RadioSelect)
    name = forms.CharField(
        label="Name", max_length=200, widget=forms.TextInput(attrs={"autocomplete": "off"})
    )
    workflow = forms.ChoiceField(label="Workflow", help_text="What each run does: a registered workflow.")
    input = forms.JSONField(
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
    priority = forms.IntegerField(label="Priority", initial=0, help_text="Higher runs first.")
    idempotent = forms.BooleanField(
        label="Safe to run twice at once (idempotent)",
        required=False,
        initial=True,
        help_text="Untick if two runs of this job must never overlap, whatever the policy.",
    )

    # Per workflow: what it does and what input it takes (the template shows the chosen one's).
    workflow_hints: dict[str, str]
    # What the last `job_save` of an existing job changed: {field: (old, new)} (for the admin's log).
    changes: dict[str, Any]
    # Who saves it (the view sets it): an edit's operator row in the job's history names them.
    actor: str = ""

    class Meta:
        model = Job
        fields = JOB_FIELDS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["workflow"].choices = workflow_choices()  # type: ignore[attr-defined]
        self.workflow_hints = workflow_hints()
        job = self.instance
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
    the job service. Returns the job, or None with the service's errors on the form."""
    fields = form.service_fields()
    try:
        if form.instance.pk is None:
            if owner_id is None:
                raise WorkflowInputError({"owner": "a job needs an owner"})
            return job_create(owner_id=owner_id, **fields)
        edit = job_update(job_id=form.instance.pk, actor=form.actor, **fields)
    except WorkflowInputError as exc:
        form.add_service_errors(exc)
        return None
    form.changes = dict(edit.changed)
    return edit.job

"""The job pages. Thin, like the order pages: the form parses, the scheduler's job selectors read
(scoped by the user: another user's job is a 404), the job services write - told whether the
user is staff (`by_staff`), as they decide who may schedule what."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from alerting.customer import (
    AlertRuleInputError,
    CustomerRuleInput,
    customer_rule_create,
    customer_rule_delete,
    customer_rule_get,
    customer_rules_with_state,
)
from alerting.models import AlertRule
from reports.timeline import run_rows, run_timeline
from sasproject.not_found import AsNotFound
from scheduler.dispatcher.selectors import (
    job_get,
    job_get_counted,
    job_history,
    job_list,
    job_owned,
    job_runs,
    job_schedule_text,
)
from scheduler.limits import LimitExceeded, RateLimited
from scheduler.models import Job, Run, TaskExecutionHistory
from scheduler.outputs import runs_outputs, steps_outputs
from scheduler.paging import IdFirstPaginator
from scheduler.permissions import staff_may
from scheduler.services.jobs import (
    JobStateError,
    job_delete,
    job_pause,
    job_preview,
    job_resume,
    job_run_now,
)
from scheduler.throttles import page_rate_refusal
from scheduler.workflows import WorkflowInputError

from .forms import AlertRuleForm, JobForm, job_save, time_zone_names
from .presenters import (
    ACTIVE,
    alert_rule_data,
    attempt_data,
    history_data,
    job_data,
    repeats_grouped,
    run_data,
    step_data,
)

PAGE_SIZE = 20
HISTORY_PAGE_SIZE = 25
RUN_NOW_OUTCOMES = {
    "started": "Started a run now.",
    "buffered": "A run is still going: this one starts when it ends.",
    "skipped": "Not started: a run is still going and the job skips overlapping runs.",
}


def _user_id(request: HttpRequest) -> int:
    user_id = request.user.pk
    assert isinstance(user_id, int), "login_required guarantees a signed-in user"
    return user_id


def _actor(request: HttpRequest) -> str:
    return f"user {request.user.get_username()} (web)"


def _staff(request: HttpRequest) -> bool:
    """May the person do staff work (the one rule, scheduler/permissions.py; not `is_staff`)."""
    return staff_may(request.user)


def _job_live(data: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    """How the job page refreshes itself (jobs/static/jobs/live.js): "fast" while a run it
    shows is going, "slow" while the job is active (a run may start), "off" otherwise (paused
    or finished with nothing going: nothing will change without the user)."""
    if any(not r["terminal"] for r in runs):
        return "fast"
    return "slow" if data["state"] == ACTIVE else "off"


def _job_or_404(request: HttpRequest, job_id: int) -> Job:
    with AsNotFound("No such job.", Job.DoesNotExist):
        return job_get(owner_id=_user_id(request), job_id=job_id)


@login_required
@require_GET
def job_list_view(request: HttpRequest) -> HttpResponse:
    page = Paginator(job_list(owner_id=_user_id(request)), PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [job_data(job) for job in page.object_list]
    return render(request, "jobs/job_list.html", {"page": page, "jobs": rows})


PREVIEW_EMPTY = "Type a cron expression to see when it runs."


def _wall_clock(moment: datetime) -> str:
    """ "Mon 2026-11-30 06:15 +01:00": what jobs/static/jobs/job_form.js writes for a time."""
    offset = moment.strftime("%z")
    return f"{moment:%a %Y-%m-%d %H:%M} {offset[:3]}:{offset[3:]}"


def _form_preview(form: JobForm) -> dict[str, Any]:
    """The preview beside the cron field, drawn with the page (issue 28: after a refused form it
    said "Type a cron expression" beside the expression typed until - or unless - the script's
    answer came). The expression and zone as typed (bound form) or saved (edit); the script asks
    again on load and on every key (with the "not before" / "not after" window, which this
    leaves to it: with one typed, the page says it is working the times out)."""
    cron = str(form["cron"].value() or "").strip()
    zone = str(form["timezone"].value() or "").strip() or "UTC"
    if not cron:
        return {"state": "empty", "text": PREVIEW_EMPTY, "times": []}
    if form["start_at"].value() or form["end_at"].value():
        return {"state": "loading", "text": f"Working out when “{cron}” runs…", "times": []}
    try:
        times = job_preview(cron=cron, timezone_name=zone, count=5)
    except WorkflowInputError as exc:
        errors = [f"{key}: {value}" for key, value in exc.errors.items()]
        return {"state": "error", "text": " · ".join(errors), "times": []}
    text = job_schedule_text(Job(is_recurring=True, cron=" ".join(cron.split()), timezone=zone))
    return {
        "state": "ok",
        "text": f"{text}:" if times else f"{text}: no run between the times given.",
        "times": [{"iso": t.isoformat(), "text": _wall_clock(t)} for t in times],
    }


def _form_page(request: HttpRequest, form: JobForm, job: Job | None, status: int = 200) -> HttpResponse:
    return render(
        request,
        "jobs/job_form.html",
        {"form": form, "job": job, "time_zones": time_zone_names(), "preview": _form_preview(form)},
        status=status,
    )


def _refused_page(request: HttpRequest, form: JobForm, job: Job | None, refused: RateLimited) -> HttpResponse:
    """Over the job_write rate: the form as typed, the refusal (naming the limit) on it, 429 with
    Retry-After; nothing saved."""
    form.is_valid()  # binds the typed values for the page; the service is not called
    form.add_error(None, refused.message)
    form.refused_by_limit = True
    response = _form_page(request, form, job, status=429)
    if refused.retry_after is not None:
        response["Retry-After"] = str(refused.retry_after)
    return response


@login_required
@require_http_methods(["GET", "POST"])
def job_create_view(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        form = JobForm(request.POST, staff=_staff(request))
        if refused := page_rate_refusal(request, "job_write"):
            return _refused_page(request, form, None, refused)
        job = job_save(form, owner_id=_user_id(request))
        if job is not None:
            messages.success(request, f"Job “{job.name}” created.")
            return redirect("jobs:detail", job_id=job.pk)
        return _form_page(request, form, None, status=429 if form.refused_by_limit else 400)
    return _form_page(request, JobForm(staff=_staff(request)), None)


@login_required
@require_http_methods(["GET", "POST"])
def job_edit_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(request, job_id)
    if request.method == "POST":
        form = JobForm(request.POST, instance=job, staff=_staff(request))
        form.actor = _actor(request)
        if refused := page_rate_refusal(request, "job_write"):
            return _refused_page(request, form, job, refused)
        saved = job_save(form)
        if saved is not None:
            messages.success(request, "Job saved.")
            return redirect("jobs:detail", job_id=job.pk)
        return _form_page(request, form, job, status=429 if form.refused_by_limit else 400)
    return _form_page(request, JobForm(instance=job, staff=_staff(request)), job)


@login_required
@require_GET
def job_detail_view(request: HttpRequest, job_id: int) -> HttpResponse:
    owner_id = _user_id(request)
    with AsNotFound("No such job.", Job.DoesNotExist):
        # With how many runs and history rows it has: the pagers' counts come with the job.
        job = job_get_counted(owner_id=owner_id, job_id=job_id)
    # Deep pages read their ids first: the last of 10,000 runs reads no row it skips.
    runs = IdFirstPaginator(
        job_runs(owner_id=owner_id, job_id=job.pk), PAGE_SIZE, count=getattr(job, "runs_count", None)
    )
    runs_page = runs.get_page(request.GET.get("runs"))
    run_outputs = runs_outputs(owner_id=owner_id, runs=runs_page.object_list)
    history = IdFirstPaginator(
        job_history(owner_id=owner_id, job_id=job.pk),
        HISTORY_PAGE_SIZE,
        count=getattr(job, "history_count", None),
    ).get_page(request.GET.get("history"))
    data = job_data(job)
    rows = [run_data(r, outputs=run_outputs[r.pk]) for r in runs_page.object_list]
    return render(
        request,
        "jobs/job_detail.html",
        {
            "job": job,
            "data": data,
            "input_json": json.dumps(job.input, sort_keys=True, ensure_ascii=False),
            "runs_page": runs_page,
            "runs": rows,
            "history_page": history,
            # The same error again and again (a retried call answering 500) is one row, "7 times".
            "history": repeats_grouped(
                [history_data(h, workflow=job.workflow) for h in history.object_list],
                key=("shown_status", "error", "reason"),
            ),
            "live": _job_live(data, rows),
            "alert_rules": [
                alert_rule_data(r) for r in customer_rules_with_state(owner_id=owner_id, job_id=job.pk)
            ],
            "rule_form": AlertRuleForm(),
        },
    )


@login_required
@require_GET
def job_run_view(request: HttpRequest, job_id: int, run_id: uuid.UUID) -> HttpResponse:
    """One run of the job: its state, steps and attempts (the raw errors too: the job is the
    user's own configuration, like an API client's)."""
    with AsNotFound("No such job.", Job.DoesNotExist):
        # Its name and zone only: none of the job page's annotations.
        job = job_owned(owner_id=_user_id(request), job_id=job_id)
    with AsNotFound("No such run of this job.", Run.DoesNotExist):
        run = job_runs(owner_id=_user_id(request), job_id=job.pk).get(pk=run_id)
    # Its steps and their history rows, read once for the steps, outputs, attempts and timeline.
    read = run_rows(run)
    steps = [step_data(s, workflow=run.workflow) for s in read.steps]
    # The attempts (the decisions between them - retry, give up - are on the timeline).
    history = [row for row in read.rows if row.kind == TaskExecutionHistory.Kind.ATTEMPT]
    data = run_data(run)
    return render(
        request,
        "jobs/job_run.html",
        {
            "job": job,
            "run": data,
            "run_obj": run,
            # What its steps returned (excerpts; the whole through the download).
            "outputs": steps_outputs(run=run, steps=read.steps),
            "steps": steps,
            # Consecutive attempts of a step that ended the same way, as one row ("3 times").
            "attempts": repeats_grouped(
                [attempt_data(a, workflow=run.workflow) for a in history], key=("step", "status", "error")
            ),
            # Every attempt, wait and recovery on one time axis, in the job's zone as the rest
            # of the page (raw errors in its hover texts: see above).
            "timeline": run_timeline(run=run, now=timezone.now(), zone=job.timezone, read=read),
            # Refreshed while the run goes (jobs/static/jobs/live.js), as the order page is.
            "live": "off" if data["terminal"] else "fast",
        },
    )


def _back(job: Job) -> HttpResponse:
    return redirect("jobs:detail", job_id=job.pk)


def _state_change(request: HttpRequest, job_id: int, call: Any, done: str, **kwargs: Any) -> HttpResponse:
    """Pause or resume: one service call, its outcome as a message, back to the job page."""
    job = _job_or_404(request, job_id)
    try:
        call(job_id=job.pk, actor=_actor(request), **kwargs)
    except JobStateError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, done)
    return _back(job)


@login_required
@require_POST
def job_pause_view(request: HttpRequest, job_id: int) -> HttpResponse:
    note = request.POST.get("note", "").strip()[:2000]
    done = "Job paused: its runs not started were cancelled; nothing of it starts until you resume it."
    return _state_change(request, job_id, job_pause, done, note=note)


@login_required
@require_POST
def job_resume_view(request: HttpRequest, job_id: int) -> HttpResponse:
    return _state_change(request, job_id, job_resume, "Job resumed. Its schedule goes on from now.")


@login_required
@require_POST
def job_run_now_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _job_or_404(request, job_id)
    if refused := page_rate_refusal(request, "job_write"):
        messages.error(request, refused.message)
        return _back(job)
    try:
        firing = job_run_now(job_id=job.pk, by_staff=_staff(request), actor=_actor(request))
    except (JobStateError, LimitExceeded) as exc:
        messages.error(request, str(exc))
    except WorkflowInputError as exc:  # staff-only work: not started
        messages.error(request, "Not started: " + "; ".join(exc.errors.get("workflow", [str(exc)])))
    else:
        text = RUN_NOW_OUTCOMES.get(firing.outcome, firing.outcome)
        level = messages.WARNING if firing.outcome == "skipped" else messages.SUCCESS
        messages.add_message(request, level, text)
    return _back(job)


@login_required
@require_http_methods(["GET", "POST"])
def job_delete_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """GET: the confirmation page; POST: delete."""
    job = _job_or_404(request, job_id)
    if request.method == "POST":
        with AsNotFound("No such job.", Job.DoesNotExist):
            job_delete(job_id=job.pk, actor=_actor(request))
        messages.success(
            request, f"Job “{job.name}” deleted. Its runs not started were cancelled; those going finish."
        )
        return redirect("jobs:list")
    context: dict[str, Any] = {"job": job, "data": job_data(job)}
    return render(request, "jobs/job_confirm_delete.html", context)


# ---------------------------------------------------------------------------------------------
# The job's alert rules: listed on the job page with the add form; delete asks first
# ---------------------------------------------------------------------------------------------


@login_required
@require_POST
def alert_rule_create_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """Add an alert rule to the job: the form parses, `customer_rule_create` decides. Refused: the
    form again with every field's error (400), nothing written."""
    job = _job_or_404(request, job_id)
    form = AlertRuleForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            rule = customer_rule_create(
                owner_id=_user_id(request),
                data=CustomerRuleInput(
                    job_id=job.pk,
                    kind=data["kind"],
                    threshold=data["threshold"],
                    min_runs=data["min_runs"],
                    window_minutes=data["window_minutes"],
                    notify_email=data["notify_email"],
                    webhook_url=data["webhook_url"].strip(),
                    name=data["name"],
                ),
            )
        except AlertRuleInputError as exc:
            form.add_service_errors(exc.errors)
        else:
            messages.success(request, f"Alert rule “{rule.name}” added.")
            return redirect(f"{reverse('jobs:detail', args=[job.pk])}#alert-rules")
    context = {"job": job, "data": job_data(job), "rule_form": form}
    return render(request, "jobs/alert_rule_form.html", context, status=400)


def _rule_or_404(request: HttpRequest, job: Job, rule_id: int) -> AlertRule:
    with AsNotFound("No such alert rule.", AlertRule.DoesNotExist):
        rule = customer_rule_get(owner_id=_user_id(request), rule_id=rule_id)
    if rule.job_id != job.pk:
        raise Http404("No such alert rule on this job.")
    return rule


@login_required
@require_http_methods(["GET", "POST"])
def alert_rule_delete_view(request: HttpRequest, job_id: int, rule_id: int) -> HttpResponse:
    """GET: the confirmation page; POST: delete the rule (its alerts go with it)."""
    job = _job_or_404(request, job_id)
    rule = _rule_or_404(request, job, rule_id)
    if request.method == "POST":
        with AsNotFound("No such alert rule.", AlertRule.DoesNotExist):
            customer_rule_delete(owner_id=_user_id(request), rule_id=rule.pk)
        messages.success(request, f"Alert rule “{rule.name}” deleted.")
        return redirect(f"{reverse('jobs:detail', args=[job.pk])}#alert-rules")
    context = {"job": job, "data": job_data(job), "rule": alert_rule_data(rule)}
    return render(request, "jobs/alert_rule_confirm_delete.html", context)

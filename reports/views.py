"""The report page. Thin: the window parser reads the query, selectors read (scoped by the
viewer), charts draw."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from sasproject.not_found import AsNotFound
from scheduler.workflows import WorkflowInputError

from .charts import durations_chart, runs_chart
from .selectors import OUTCOME_LABELS, OUTCOMES, ReportNotFound, report_subject, report_usernames, user_report
from .svg import format_duration
from .windows import DEFAULT_WINDOW, WINDOW_CHOICES, window_parse

WINDOW_LABELS = {"hour": "Last hour", "day": "Last day", "week": "Last week", "custom": "Range"}


@login_required
@require_GET
def report_view(request: HttpRequest) -> HttpResponse:
    params = {key: request.GET.get(key, "") for key in ("window", "start", "end", "tz", "user")}
    with AsNotFound("No such user.", ReportNotFound):
        subject = report_subject(viewer=request.user, username=params["user"])
    context: dict[str, Any] = {
        "params": params,
        "window_name": params["window"] or ("custom" if params["start"] or params["end"] else DEFAULT_WINDOW),
        "windows": [(name, WINDOW_LABELS[name]) for name in WINDOW_CHOICES],
        "usernames": report_usernames(viewer=request.user),
        "subject": subject,
        "outcomes": [(name, OUTCOME_LABELS[name]) for name in OUTCOMES],
    }
    now = timezone.now()
    try:
        window = window_parse(params, now=now)
    except WorkflowInputError as exc:
        context["errors"] = exc.errors
        return render(request, "reports/report.html", context, status=400)
    report = user_report(user=subject, window=window, now=now)
    context.update(
        report=report,
        window=window,
        runs_svg=runs_chart(report.buckets, window=window),
        durations_svg=durations_chart(report.buckets, window=window),
        p50=format_duration(report.total.p50),
        p95=format_duration(report.total.p95),
        api_query=request.GET.urlencode(),
    )
    return render(request, "reports/report.html", context)

"""The periodic tasks' admin, as operators may use it (issue 26): the schedule only.

django-celery-beat's stock `PeriodicTaskAdmin` lets anyone holding
`django_celery_beat.change_periodictask` - the "Operators" role - rewrite a periodic task's
`task`, `args`, `kwargs`, `queue`, `exchange`, `routing_key`, `priority` and `headers`: beat then
sends whatever message they typed, to any queue, every tick (an agent's refund, a payment) - a
way round every check the engine makes. Re-registered here:

- a superuser edits everything, as before, and alone adds periodic tasks (the deployment's own
  come from `setup_periodic_tasks`);
- anyone else edits the schedule only - enabled, interval / crontab / solar / clocked, start
  time, one-off, expiry; what the task does, its name and its description are shown read-only,
  and a POST that sends any of them anyway is refused with a message (nothing saved);
- every action asks a permission: enable / disable / toggle need `change`; "run selected tasks"
  (sends each task's stored message now) needs staff work (scheduler/permissions.py). The
  read-only role holds neither.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django_celery_beat.admin import PeriodicTaskAdmin
from django_celery_beat.models import PeriodicTask

from scheduler.permissions import STAFF_WORK, staff_may

# What the task does, and what names it: a superuser's to change.
WHAT_FIELDS = (
    "name",
    "task",
    "args",
    "kwargs",
    "queue",
    "exchange",
    "routing_key",
    "priority",
    "headers",
    "description",
)
# The form's own "Task (registered)" chooser, which sets `task`.
WHAT_FORM_FIELDS = (*WHAT_FIELDS, "regtask")
SCHEDULE_ONLY_MESSAGE = (
    "Only the schedule can be changed here (enabled, interval, crontab, solar, clocked, start "
    "time, one-off, expiry). The task, its name, arguments, queue, routing, priority and headers "
    "are set by the deployment (setup_periodic_tasks) or a superuser; not saved: {fields}."
)


def may_edit_everything(request: HttpRequest) -> bool:
    """A superuser edits what a periodic task does; everyone else its schedule only."""
    return bool(request.user.is_active and request.user.is_superuser)


class ScheduleOnlyForm(forms.ModelForm):
    """The change form of someone who edits the schedule only. Its fields are the schedule's
    (the admin passes them); a POST naming any other refuses the whole save."""

    class Meta:
        model = PeriodicTask
        fields = (
            "enabled",
            "interval",
            "crontab",
            "solar",
            "clocked",
            "start_time",
            "one_off",
            "expires",
            "expire_seconds",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        sent = sorted(name for name in WHAT_FORM_FIELDS if name in self.data)
        if sent:
            raise forms.ValidationError(SCHEDULE_ONLY_MESSAGE.format(fields=", ".join(sent)))
        if data.get("expire_seconds") is not None and data.get("expires"):
            raise forms.ValidationError("Only one can be set, in expires and expire_seconds")
        return data


class ScheduleOnlyPeriodicTaskAdmin(PeriodicTaskAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return may_edit_everything(request) and bool(super().has_add_permission(request))

    def has_staff_work_permission(self, request: HttpRequest) -> bool:
        return staff_may(request.user, STAFF_WORK)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        base = tuple(super().get_readonly_fields(request, obj))
        if may_edit_everything(request):
            return base
        return (*base, *(name for name in WHAT_FIELDS if name not in base))

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)
        if may_edit_everything(request):
            return fieldsets
        # The registered-task chooser is a form field only: shown read-only as `task` instead.
        return [
            (title, {**options, "fields": tuple(f for f in options["fields"] if f != "regtask")})
            for title, options in fieldsets
        ]

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if not may_edit_everything(request):
            kwargs["form"] = ScheduleOnlyForm
        return super().get_form(request, obj, change=change, **kwargs)

    # The stock actions, each with the permission it needs (they have none of their own, so
    # the read-only role could enable, disable or run every periodic task).

    @admin.action(description="Enable selected tasks", permissions=["change"])
    def enable_tasks(self, request: HttpRequest, queryset: QuerySet[PeriodicTask]) -> None:
        super().enable_tasks(request, queryset)

    @admin.action(description="Disable selected tasks", permissions=["change"])
    def disable_tasks(self, request: HttpRequest, queryset: QuerySet[PeriodicTask]) -> None:
        super().disable_tasks(request, queryset)

    @admin.action(description="Toggle activity of selected tasks", permissions=["change"])
    def toggle_tasks(self, request: HttpRequest, queryset: QuerySet[PeriodicTask]) -> None:
        super().toggle_tasks(request, queryset)

    @admin.action(description="Run selected tasks", permissions=["staff_work"])
    def run_tasks(self, request: HttpRequest, queryset: QuerySet[PeriodicTask]) -> None:
        super().run_tasks(request, queryset)


if admin.site.is_registered(PeriodicTask):
    admin.site.unregister(PeriodicTask)
admin.site.register(PeriodicTask, ScheduleOnlyPeriodicTaskAdmin)

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from scheduler.permissions import staff_may


class Command(BaseCommand):
    help = (
        "Create the demo admin user (admin/admin unless DEMO_ADMIN_* say otherwise), the periodic tasks "
        "and a few recurring demo jobs: the order workflow, a schedulable task, an HTTP call and the "
        "catalogue's paginated reprice. Demo mode only (SAS_DEMO=1, which `make run` sets); a "
        "deployment runs `setup_periodic_tasks` and creates its users with `createsuperuser`."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.SAS_DEMO:
            # A known admin login on a reachable site is an open door (issue 19): never by default.
            raise CommandError(
                "demo_setup creates a demo admin with a known password and runs only in demo mode "
                "(SAS_DEMO=1, set by `make run`). A deployment runs `manage.py setup_periodic_tasks` "
                "and `manage.py createsuperuser` instead (docs/deploying/deploy.md)."
            )
        username = os.environ.get("DEMO_ADMIN_USER", "admin")
        password = os.environ.get("DEMO_ADMIN_PASSWORD", "admin")
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(
            username=username, defaults={"is_staff": True, "is_superuser": True, "email": "admin@example.com"}
        )
        if created:
            user.set_password(password)
            user.save()
            self.stdout.write(f"demo admin created: {username} / {password}")
        elif user.is_active and user.is_staff and user.is_superuser and user.check_password(password):
            self.stdout.write(f"demo admin exists: {username} / {password}")
        else:
            # Left as it is (someone may have changed it on purpose), but the login `make run`
            # prints would not work: say so, and how to fix it.
            self.stderr.write(
                f"warning: user {username!r} exists but cannot log in to the admin with password "
                f"{password!r} (changed password, or not an active superuser); reset it with "
                f"`python manage.py changepassword {username}` or set DEMO_ADMIN_PASSWORD"
            )
        call_command("setup_periodic_tasks", stdout=self.stdout)
        self._demo_jobs(user.pk, staff=staff_may(user))

    def _demo_jobs(self, owner_id: int, *, staff: bool) -> None:
        """Recurring jobs of each kind a job can run, so `make run` shows jobs firing (the jobs
        dispatcher, scheduler/jobs.md): the order workflow, a schedulable Celery task, an HTTP
        call to the simulator (on the allowlist by default) and the catalogue's paginated
        reprice (issue 9). Left alone when they exist (a user may have edited or paused them);
        DEMO_JOBS=0 skips them. They belong to the demo admin, a staff user: the purge and the
        reprice are staff-only work (if the admin user may not do staff work -
        scheduler/permissions.py - they are left out)."""
        if os.environ.get("DEMO_JOBS", "1") == "0":
            return
        from scheduler.models import Job
        from scheduler.services import job_create
        from scheduler.workflows import WorkflowNotPermitted

        sample = {"items": [{"sku": "SKU-DEMO", "quantity": 1}], "amount": "9.99", "currency": "EUR"}
        simulator = os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055").rstrip("/")
        order = "order_fulfilment"
        demo: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
            (
                "demo: sample order every minute",
                order,
                sample,
                {"cron": "* * * * *", "overlap_policy": "skip"},
            ),
            (
                "demo: restock order every 5 minutes",
                order,
                sample,
                {"cron": "*/5 * * * *", "overlap_policy": "buffer_one", "max_retry": 2, "jitter": 20},
            ),
            (
                "demo: nightly order (Berlin)",
                order,
                sample,
                {"cron": "30 2 * * *", "timezone_name": "Europe/Berlin"},
            ),
            (
                "demo: purge old webhook deliveries (daily)",
                "task:webhooks.purge_deliveries",
                {"kwargs": {"older_than_days": 30}},
                {"cron": "15 3 * * *"},
            ),
            (
                "demo: ping the simulator every 5 minutes",
                "http.call",
                {
                    "method": "POST",
                    "url": f"{simulator}/echo",
                    "body": {"ping": True},
                    "expected_status": 200,
                },
                {"cron": "*/5 * * * *", "max_retry": 1},
            ),
            (
                "demo: reprice the catalogue +1% hourly",
                "catalogue.reprice",
                {"percent": "1"},
                {"cron": "0 * * * *", "overlap_policy": "skip"},
            ),
        ]
        created = []
        for name, workflow, job_input, schedule in demo:
            if Job.objects.filter(owner_id=owner_id, name=name).exists():
                continue
            try:
                job_create(
                    owner_id=owner_id,
                    by_staff=staff,
                    name=name,
                    workflow=workflow,
                    input=job_input,
                    **schedule,
                )
            except WorkflowNotPermitted as exc:
                self.stderr.write(f"warning: demo job {name!r} left out: {exc}")
                continue
            created.append(name)
        self.stdout.write(f"demo jobs {'created: ' + ', '.join(created) if created else 'in place'}")

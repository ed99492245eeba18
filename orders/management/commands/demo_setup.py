from __future__ import annotations

import os
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create the demo admin user (admin/admin unless DEMO_ADMIN_* say otherwise) and the periodic tasks."
    )

    def handle(self, *args: Any, **options: Any) -> None:
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

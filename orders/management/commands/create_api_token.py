from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sasproject.tokens.services import api_token_of, api_token_rotate


class Command(BaseCommand):
    help = (
        "Make USERNAME's API token and print its key - once: it is stored hashed. Use it as "
        "'Authorization: Token <key>'. A user with a live token needs --rotate (the old key stops working)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="Replace the user's token with a new one.")

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        name = options["username"]
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: name})
        except user_model.DoesNotExist:
            raise CommandError(
                f"no user {name!r}: create it first with `manage.py create_user {name}`"
            ) from None
        current = api_token_of(user_id=user.pk)
        if current is not None and not current.expired and not options["rotate"]:
            raise CommandError(
                f"{name!r} has a token already ({current.prefix}…, expires {current.expires_at:%Y-%m-%d}); "
                "its key is stored hashed and cannot be shown again: --rotate replaces it"
            )
        self.stdout.write(api_token_rotate(user_id=user.pk).key)

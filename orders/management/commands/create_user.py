from __future__ import annotations

import getpass
import sys
from typing import Any, TextIO

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction


class Command(BaseCommand):
    help = (
        "Create a customer account USERNAME: signs in to the order pages with its password and "
        "uses the API with the token from `create_api_token USERNAME`. Asks for the password "
        "(twice) on a terminal; --password-stdin reads it from standard input (scripts); "
        "--no-password makes an API-only account. Not staff: operators use createsuperuser."
    )
    # Lets tests and scripts pass `stdin=` to call_command, as Django's createsuperuser does.
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--email", default="", help="The user's e-mail address (optional).")
        source = parser.add_mutually_exclusive_group()
        source.add_argument(
            "--password-stdin", action="store_true", help="Read the password from the first line of stdin."
        )
        source.add_argument(
            "--no-password",
            action="store_true",
            help="No password: the account cannot sign in to the pages, only use its API token.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        username = options["username"].strip()
        if not username:
            raise CommandError("the username must not be empty")
        if user_model.objects.filter(**{user_model.USERNAME_FIELD: username}).exists():
            raise CommandError(f"user {username!r} already exists (reset a password with `changepassword`)")
        user = user_model(**{user_model.USERNAME_FIELD: username}, email=options["email"])
        password = None if options["no_password"] else self._password(options)
        if password is not None:
            try:
                validate_password(password, user)
            except ValidationError as exc:
                raise CommandError("password refused: " + " ".join(exc.messages)) from None
        user.set_password(password)  # None: an unusable password
        with transaction.atomic():
            user.save()
        how = "API only; get its token with" if password is None else "it can sign in; its API token:"
        self.stdout.write(f"user {username!r} created ({how} `manage.py create_api_token {username}`)")

    def _password(self, options: dict[str, Any]) -> str:
        stdin: TextIO = options.get("stdin") or sys.stdin
        if options["password_stdin"]:
            password = stdin.readline().rstrip("\r\n")
            if not password:
                raise CommandError("no password on stdin")
            return password
        if not stdin.isatty():
            raise CommandError("no terminal to ask for a password on: use --password-stdin or --no-password")
        password = getpass.getpass("Password: ")
        if password != getpass.getpass("Password (again): "):
            raise CommandError("the two passwords differ; nothing created")
        return password

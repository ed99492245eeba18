from __future__ import annotations

from django.apps import AppConfig


class TokensConfig(AppConfig):
    name = "sasproject.tokens"
    label = "apitokens"
    verbose_name = "API tokens"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # A password change revokes the user's API token.
        from . import signals  # noqa: F401

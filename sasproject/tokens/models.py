from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class ApiToken(models.Model):
    """A user's API token: only its SHA-256 digest is stored (the key is shown once, when made),
    and its first characters, to recognise it on the page. One per user: rotating replaces it."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_token")
    # hex SHA-256 of the whole key; keys are 160 random bits, so no salt or slow hash is needed.
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.prefix}… (user {self.user_id}, expires {self.expires_at:%Y-%m-%d})"

    @property
    def expired(self) -> bool:
        return self.expires_at <= timezone.now()

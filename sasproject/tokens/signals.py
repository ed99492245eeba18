"""A password change revokes the user's API token (whoever learnt the old password may have
made one). A change is what Django itself calls one: set_password() (the sign-in forms' password
change, the admin's, `changepassword`, create_user) - marked by `_password` until the save - and
set_unusable_password(). Django re-hashing the same password on sign-in (a stronger hasher or more
iterations) clears `_password` first and is no change: an upgrade must not revoke every token."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import UNUSABLE_PASSWORD_PREFIX
from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver

from .services import api_token_revoke

User = get_user_model()


def _password_changed(instance: Any, update_fields: Any) -> bool:
    if instance._state.adding or instance.pk is None:
        return False
    if update_fields is not None and "password" not in update_fields:
        return False
    if getattr(instance, "_password", None) is not None:
        return True
    if not str(instance.password or "").startswith(UNUSABLE_PASSWORD_PREFIX):
        return False
    old = User.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
    return old is not None and not str(old).startswith(UNUSABLE_PASSWORD_PREFIX)


@receiver(pre_save, sender=User, dispatch_uid="apitokens-password-changed")
def _password_changed_note(sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any) -> None:
    instance._sas_password_changed = _password_changed(instance, update_fields)


@receiver(post_save, sender=User, dispatch_uid="apitokens-password-changed-revoke")
def _password_changed_revoke(sender: Any, instance: Any, **kwargs: Any) -> None:
    if getattr(instance, "_sas_password_changed", False):
        instance._sas_password_changed = False
        api_token_revoke(user_id=instance.pk)

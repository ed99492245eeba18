"""The 403 page (issue 28): Django's `handler403` (sasproject/urls.py names it as a string:
sasproject never imports ops). A staff account without the role a page needs used to get a bare
"403 Forbidden" with no way back; now a page in the admin's look under /admin/ (the site's
elsewhere) that says which role and permission are missing, with links back.

What is missing comes from the refusal itself (`PermissionDenied("This needs the Operators
role ...")`, raised by the operator's tools with `roles.permission_missing_words`), or, for the
admin's own pages (which raise it bare), from the URL: `<app>_<model>_<view>` names the model,
and the view the permission (add, delete, else view).

The log line is `django.request`'s WARNING, "Forbidden (Permission denied): <path>", given the
reason found here and no traceback (sasproject.logs.ExpectedForbiddenFilter): a refusal is
expected, not a crash.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import Resolver404, resolve, reverse
from django.utils.http import url_has_allowed_host_and_scheme

from .roles import permission_missing_words

# Read by sasproject.logs.ExpectedForbiddenFilter for the log line (no import between them:
# sasproject never imports ops).
REASON_ATTRIBUTE = "sas_forbidden_reason"

GENERIC = "Your account does not have the permission this page needs."


def _admin_permission(request: HttpRequest) -> str | None:
    """The permission an admin page of a registered model asks for, from its URL name."""
    try:
        url_name = resolve(request.path_info).url_name or ""
    except Resolver404:
        return None
    for model in admin.site._registry:
        meta = model._meta
        prefix = f"{meta.app_label}_{meta.model_name}_"
        if url_name.startswith(prefix):
            view = url_name[len(prefix) :]
            action = view if view in ("add", "delete") else "view"
            return f"{meta.app_label}.{action}_{meta.model_name}"
    return None


def forbidden_reason(request: HttpRequest, exception: BaseException | None) -> str:
    """What the page says is missing."""
    said = str(exception or "").strip()
    if said:
        return said
    permission = _admin_permission(request) if _in_admin(request) else None
    return permission_missing_words(permission) if permission else GENERIC


def _in_admin(request: HttpRequest) -> bool:
    return request.path.startswith(reverse("admin:index"))


def _page_before(request: HttpRequest) -> str:
    """The Referer, if it is a page of this site other than this one."""
    referer = request.headers.get("referer", "")
    safe = url_has_allowed_host_and_scheme(
        referer, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return referer if safe and referer != request.build_absolute_uri() else ""


def permission_denied(request: HttpRequest, exception: BaseException | None = None) -> HttpResponse:
    """handler403: the styled page, status 403."""
    reason = forbidden_reason(request, exception)
    setattr(request, REASON_ATTRIBUTE, reason)
    in_admin = _in_admin(request)
    context = {
        "title": "Permission needed",
        "reason": reason,
        "in_admin": in_admin,
        "base_template": "admin/base_site.html" if in_admin else "base.html",
        "home_url": reverse("admin:index") if in_admin else "/",
        "home_label": "Back to the admin's home page" if in_admin else "Go to your orders",
        "back_url": _page_before(request),
    }
    if in_admin:
        context.update(admin.site.each_context(request))
    return render(request, "403.html", context, status=403)

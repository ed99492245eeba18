"""The customer's API token page: what the token is (its first characters, its expiry), a
button to make a new one - shown once, on the page that made it - and one to revoke it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods

from .services import api_token_of, api_token_revoke, api_token_rotate


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def api_token_page(request: HttpRequest) -> HttpResponse:
    user_id = request.user.pk
    assert isinstance(user_id, int), "login_required guarantees a signed-in user"
    context: dict[str, object] = {}
    if request.method == "POST":
        action = request.POST.get("action", "")
        if action == "rotate":
            issued = api_token_rotate(user_id=user_id)
            context["new_key"] = issued.key
        elif action == "revoke":
            revoked = api_token_revoke(user_id=user_id)
            messages.success(request, "API token revoked." if revoked else "You had no API token.")
            return redirect("api-token-page")
        else:
            messages.error(request, "Unknown action: nothing changed.")
            return redirect("api-token-page")
    context["token"] = api_token_of(user_id=user_id)
    return TemplateResponse(request, "account/api_token.html", context)

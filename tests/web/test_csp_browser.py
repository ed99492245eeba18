"""The Content-Security-Policy (issue 26): every response carries it, and every page - the
customer's and the admin's - works under it in headless Chromium with no violation reported
(the `securitypolicyviolation` events and Chromium's console both watched). The pages' scripts
still run (the order form adds a row, the progress bars get their width). Screenshots:
artifacts/csp-*.png."""

from __future__ import annotations

import hashlib
import re
from base64 import b64encode
from pathlib import Path
from typing import Any

from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from catalogue.services import reprice_submit
from orders.services import order_submit
from orders.workflows import ORDER_WORKFLOW
from scheduler.models import Run
from scheduler.services.jobs import job_create

from ..e2e.helpers import ORDER, wait_run
from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _sign_in

POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}

# Registered before any page script runs: the violations the page reports, kept on the window.
_WATCH_JS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  const where = `${e.sourceFile}:${e.lineNumber}`;
  window.__csp.push(`${e.effectiveDirective} blocked ${e.blockedURI || "inline"} at ${where}`);
});
"""


def _policy(header: str) -> dict[str, str]:
    return dict(part.strip().split(" ", 1) for part in header.split(";"))


def _error_page_style_hash() -> str:
    """The hash of the <style> in the 500 page as Django renders it."""
    (style,) = re.findall(r"<style>(.*?)</style>", render_to_string("500.html"), re.S)
    return f"'sha256-{b64encode(hashlib.sha256(style.encode()).digest()).decode()}'"


def test_policy__on_every_response(live_db: None) -> None:
    client = Client()
    page = client.get("/accounts/login/")
    probe = client.get("/healthz")
    api = client.get("/api/orders/")

    for response in (page, probe, api):
        policy = _policy(response.headers["Content-Security-Policy"])
        assert {name: policy.get(name) for name in POLICY} == POLICY, response.request["PATH_INFO"]
        # Styles from the site's files, and the stand-alone error page's own <style>, by its hash.
        assert policy["style-src"] == f"'self' {_error_page_style_hash()}"


def test_browser__every_page_under_the_policy__no_violation(
    engine: Any, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("csp")
    # An operator: the admin's pages, the catalogue and the report's user picker are theirs.
    user.is_staff = user.is_superuser = True
    user.save()
    order = order_submit(owner_id=user.pk, data=ORDER)
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name="csp nightly",
        workflow=ORDER_WORKFLOW,
        input=ORDER,
        cron="0 3 * * *",
    )
    reprice = reprice_submit(owner_id=user.pk, by_staff=True, percent=5)
    wait_run(order.run_id, tuple(Run.TERMINAL_STATES), timeout=60)
    pages = {
        "orders": reverse("orders:list"),
        "order-form": reverse("orders:create"),
        "order": reverse("orders:detail", args=[order.pk]),
        "jobs": reverse("jobs:list"),
        "job-form": reverse("jobs:create"),
        "job": reverse("jobs:detail", args=[job.pk]),
        "reports": reverse("reports:page"),
        "exports": reverse("exports:list"),
        "catalogue": reverse("catalogue:index"),
        "reprice": reverse("catalogue:reprice", args=[reprice.pk]),
        "admin": reverse("admin:index"),
        "admin-runs": reverse("admin:scheduler_run_changelist"),
        "admin-run": reverse("admin:scheduler_run_change", args=[order.run_id]),
        "admin-health": reverse("admin:scheduler_run_health"),
        "admin-job": reverse("admin:scheduler_job_change", args=[job.pk]),
    }
    console: list[str] = []
    violations: dict[str, list[str]] = {}
    headers: dict[str, str] = {}

    with open_page(web_server) as page:
        page.context.add_init_script(_WATCH_JS)
        page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
        _sign_in(page, user.username)
        for name, path in pages.items():
            response = page.goto(path)
            headers[name] = response.headers.get("content-security-policy", "")
            page.wait_for_load_state("networkidle")
            violations[name] = page.evaluate("window.__csp")
            page.screenshot(path=str(artifacts_dir / f"csp-{name}.png"), full_page=True)
            if name == "order":
                # bars.js gave the finished order's bar its width from data-percent.
                fill = page.evaluate(
                    "() => { const f = document.querySelector('#progress .progress-fill');"
                    " return [f.dataset.percent, f.getBoundingClientRect().width,"
                    " f.parentElement.getBoundingClientRect().width]; }"
                )
            if name == "order-form":
                page.click("#add-item")
                added_row = page.locator("#id_items-1-sku").count()

    assert {name: header != "" for name, header in headers.items()} == {name: True for name in pages}
    assert violations == {name: [] for name in pages}
    assert console == []
    assert fill[0] == "100" and fill[1] > 0 and abs(fill[1] - fill[2]) < 1
    assert added_row == 1


def test_browser__error_page_styled_under_the_policy(web_server: str, artifacts_dir: Path) -> None:
    """templates/500.html stands alone with an inline <style>: served with the web's own policy
    header, Chromium applies its style (allowed by hash) and reports nothing."""
    html = render_to_string("500.html")
    policy = Client().get("/healthz").headers["Content-Security-Policy"]
    served = {"Content-Type": "text/html", "Content-Security-Policy": policy}
    console: list[str] = []

    with open_page(web_server) as page:
        page.context.add_init_script(_WATCH_JS)
        page.on("console", lambda m: console.append(m.text) if "Content Security Policy" in m.text else None)
        page.route(
            "**/error-page-under-csp",
            lambda route: route.fulfill(status=500, body=html, headers=served),
        )
        page.goto("/error-page-under-csp")
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        violations = page.evaluate("window.__csp")
        page.screenshot(path=str(artifacts_dir / "csp-500.png"), full_page=True)

    assert background == "rgb(245, 247, 251)"  # the page's #f5f7fb
    assert violations == [] and console == []

"""The production web in a real browser (issue 19): the image's way - `collectstatic` into a
folder, then gunicorn with DEBUG off under docker/production.env.example (a real key, this
session's database and Redis) - behind a TLS proxy, played by the X-Forwarded-Proto header.
The pages' and the admin's stylesheets load from whitenoise (hashed, compressed, cached for a
year) and apply; plain HTTP is redirected to HTTPS except the probes; a wrong URL shows the
branded 404. Screenshots: artifacts/production/."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sastools.harness import REPO, procfile_process, wait_for

from .support import production_env, real_secret_key

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-sync",
]
PROXY = {"X-Forwarded-Proto": "https"}
PASSWORD = "production-browser-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(base: str, path: str, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """One GET, redirects not followed."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", path, headers={"Accept-Encoding": "gzip", **(headers or {})})
        response = conn.getresponse()
        response.read()
        return response
    finally:
        conn.close()


def _is_json_object(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@pytest.fixture(scope="module")
def production_web(worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    static_root = tmp_path_factory.mktemp("staticfiles")
    log_dir = tmp_path_factory.mktemp("production-web")
    port = _free_port()
    env = production_env(
        DJANGO_SECRET_KEY=real_secret_key(),
        DJANGO_STATIC_ROOT=str(static_root),
        DATABASE_URL=worker_env["DATABASE_URL"],
        REDIS_URL=worker_env["REDIS_URL"],
        SAS_REDIS_PREFIX=worker_env["SAS_REDIS_PREFIX"],
        SIMULATOR_URL=worker_env["SIMULATOR_URL"],
        WEB_PORT=str(port),
        # The browser's origin here is plain http on the loopback; behind the real proxy it is
        # the site's https origin (the example's DJANGO_CSRF_TRUSTED_ORIGINS).
        DJANGO_CSRF_TRUSTED_ORIGINS=f"http://127.0.0.1:{port}",
    )
    for key in ("SAS_INVENTORY_URL", "SAS_PAYMENT_URL", "SAS_SHIPPING_URL"):
        env.pop(key)
    # As the Dockerfile does at build time.
    collect = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "--verbosity", "0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collect.returncode == 0, collect.stderr
    assert (static_root / "staticfiles.json").exists()
    proc = procfile_process("web", log_dir=log_dir, env=env).start(ready_marker="Booting worker")
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return _get(base, "/accounts/login/", PROXY).status == 200
        except OSError:
            assert proc.alive(), proc.log()[-3000:]
            return False

    try:
        wait_for(up, timeout=40, interval=0.2, what="the production web to answer")
        yield base
    finally:
        proc.stop()
    # LOG_FORMAT=json (the example's): gunicorn's lines (start, access, shutdown) and Django's
    # alike are JSON objects - read once it has stopped, so no line is half written.
    lines = [line for line in proc.log().splitlines() if line.strip()]
    assert lines and [line for line in lines if not _is_json_object(line)] == []


@pytest.fixture
def users(live_db: None) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    model = get_user_model()
    customer = model.objects.create_user(username="prod-customer", password=PASSWORD)
    operator = model.objects.create_superuser(
        username="prod-operator", password=PASSWORD, email="ops@example.com"
    )
    return {"customer": customer, "operator": operator}


def test_plain_http__redirected_to_https__probes_exempt(production_web: str) -> None:
    page = _get(production_web, "/accounts/login/")
    probe = _get(production_web, "/healthz")

    assert page.status == 301 and page.headers["Location"].startswith("https://")
    assert probe.status != 301


def test_static__hashed_compressed_and_cached_for_a_year(production_web: str) -> None:
    login = urllib.request.Request(f"{production_web}/accounts/login/", headers=PROXY)
    with urllib.request.urlopen(login, timeout=10) as response:
        html = response.read().decode()
        hsts = response.headers["Strict-Transport-Security"]
    css = re.search(r'href="(/static/orders/app\.[0-9a-f]{12}\.css)"', html)

    assert css, "the pages' stylesheet is not the hashed name collectstatic wrote"
    assert hsts == "max-age=31536000; includeSubDomains; preload"
    static = _get(production_web, css[1], PROXY)
    assert static.status == 200
    assert static.headers["Content-Encoding"] == "gzip"
    assert (
        "max-age=315360000" in static.headers["Cache-Control"]
        and "immutable" in static.headers["Cache-Control"]
    )
    assert _get(production_web, "/static/orders/app.css.missing", PROXY).status == 404


def test_browser__pages_admin_and_404_styled_with_debug_off(
    production_web: str, users: dict[str, Any], artifacts_dir: Path
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make test does)")
    from playwright.sync_api import sync_playwright

    shots = artifacts_dir / "production"
    shots.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    styled = (
        "(name) => [...document.styleSheets]"
        ".some(s => (s.href || '').includes(name) && s.cssRules.length > 0)"
    )
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(
                base_url=production_web, viewport={"width": 1280, "height": 860}, extra_http_headers=PROXY
            )
            page = context.new_page()
            page.set_default_timeout(20_000)
            page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)

            page.goto("/accounts/login/")
            assert page.evaluate(styled, "orders/app.")
            # The pages' look: app.css's background, not the browser's white.
            assert (
                page.evaluate("() => getComputedStyle(document.body).backgroundColor") == "rgb(245, 247, 251)"
            )
            page.screenshot(path=str(shots / "01-login.png"), full_page=True)

            page.fill("#id_username", "prod-customer")
            page.fill("#id_password", PASSWORD)
            page.click("button[type=submit], input[type=submit]")
            page.wait_for_selector(".topbar .nav")
            assert "prod-customer" in page.inner_text(".nav-user")
            page.screenshot(path=str(shots / "02-orders.png"), full_page=True)

            response = page.goto("/no-such-page/")
            assert response is not None and response.status == 404
            assert page.inner_text("#error-page h1") == "Page not found"
            assert "URLconf" not in page.content()
            assert page.evaluate(styled, "orders/app.")
            page.screenshot(path=str(shots / "03-not-found.png"), full_page=True)
            failed.remove(f"404 {production_web}/no-such-page/")

            page.context.clear_cookies()
            page.goto("/admin/login/?next=/admin/")
            page.fill("#id_username", "prod-operator")
            page.fill("#id_password", PASSWORD)
            page.click("input[type=submit]")
            page.wait_for_selector("#content")
            assert page.evaluate(styled, "admin/css/base.")
            page.screenshot(path=str(shots / "04-admin.png"), full_page=True)
        finally:
            browser.close()

    assert failed == []
    assert os.path.getsize(shots / "04-admin.png") > 10_000

"""Sign-in throttling (issue 22, "Bad input, tried for real") in headless Chromium, on the
Procfile's web: five wrong passwords for one username on the site's sign-in page, then the
right one - refused, with a message that names the limit and the wait; the same on the admin's
sign-in page for a staff account (four failures counted beforehand, the fifth and the right
password in the browser). Screenshots `login-throttled-site.png` and
`login-throttled-admin.png` in the artifacts folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from sasproject.login_throttle import login_attempt_begin

from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import PASSWORD

MESSAGE = "Too many failed sign-in attempts for this username from this address"


def _guess(page: Any, *, path: str, username: str, password: str, submit: str) -> str:
    """One sign-in attempt; the page's text after it."""
    page.goto(path)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click(submit)
    page.wait_for_load_state()
    return str(page.locator("body").inner_text())


def test_browser__site_and_admin_sign_in__throttled_after_the_limit__right_password_refused_with_the_wait(
    live_db: None, web_server: str, artifacts_dir: Path
) -> None:
    limit = int(settings.SAS_LOGIN_THROTTLE["FAILURES_PER_USERNAME"])
    customer = make_user("throttled")
    operator = make_user("throttledops")
    operator.is_staff = True
    operator.save()
    for _ in range(limit - 1):  # counted as the form counts them: before a check, never taken back
        assert login_attempt_begin(username=operator.username, address="127.0.0.1") is None

    with open_page(web_server) as page:
        site: dict[str, str] = {}
        for n in range(limit):
            site[f"wrong {n + 1}"] = _guess(
                page,
                path="/accounts/login/",
                username=customer.username,
                password=f"nope-{n}",
                submit="button[type=submit]",
            )
        site["right"] = _guess(
            page,
            path="/accounts/login/",
            username=customer.username,
            password=PASSWORD,
            submit="button[type=submit]",
        )
        site_url = page.url
        site_alert = page.locator(".alert-error").inner_text()
        page.screenshot(path=str(artifacts_dir / "login-throttled-site.png"), full_page=True)

        # The admin's form counts the same way (the site's part above shows the counting): the
        # limit less one failures counted already, then one wrong password and the right one.
        admin = {
            "wrong": _guess(
                page,
                path="/admin/login/",
                username=operator.username,
                password="nope",
                submit="input[type=submit]",
            )
        }
        admin["right"] = _guess(
            page,
            path="/admin/login/",
            username=operator.username,
            password=PASSWORD,
            submit="input[type=submit]",
        )
        admin_url = page.url
        admin_note = page.locator(".errornote").inner_text()
        page.screenshot(path=str(artifacts_dir / "login-throttled-admin.png"), full_page=True)

    # Up to the limit: the usual refusal, no throttle message.
    for text in [*list(site.values())[:limit], admin["wrong"]]:
        assert MESSAGE not in text
    # Then even the right password is refused, and the page says why and for how long.
    window_minutes = round(int(settings.SAS_LOGIN_THROTTLE["WINDOW"]) / 60)
    for where, alert, url in (("site", site_alert, site_url), ("admin", admin_note, admin_url)):
        assert MESSAGE in alert, (where, alert)
        assert f"the limit is {limit} per {window_minutes} minutes" in alert, (where, alert)
        assert "Try again in" in alert, (where, alert)
        assert url.rstrip("/").endswith("login"), (where, url)  # still on the sign-in page

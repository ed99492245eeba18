"""Issue 18 in headless Chromium: the job form given what gave a 500 on main - a JSON input
nested 1,000 deep, a start in year 9999 and a catch-up window of 1e20 seconds - answers with
the form again, each error on its field naming the limit, and nothing saved. Screenshot
`jobs-13-form-limits.png`, `jobs-14-form-year.png` in the artifacts folder."""

from __future__ import annotations

from pathlib import Path

from scheduler.models import Job

from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _sign_in
from .test_jobs_browser import ORDER_INPUT


def test_browser__job_form__inputs_that_gave_a_500__errors_on_their_fields_nothing_saved(
    live_db: None, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("jobbad")

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        page.goto("/jobs/new/")
        page.wait_for_selector("#id_input")
        page.select_option("#id_workflow", "order_fulfilment")
        page.fill("#id_name", "too much")
        page.fill("#id_input", "[" * 1000 + "]" * 1000)
        page.fill("#id_cron", "*/5 * * * *")
        page.fill("#id_start_at", "9999-12-31T23:59")
        page.fill("#id_catchup_window", "100000000000000000000")
        page.click("#save-job")
        page.wait_for_selector("#field-input .error")
        errors = {
            field: page.locator(f"#field-{field} .error").inner_text()
            for field in ("input", "catchup_window")
        }
        status = page.locator("body").inner_text()
        page.screenshot(path=str(artifacts_dir / "jobs-13-form-limits.png"), full_page=True)
        # Those two fixed, the year is the job service's refusal, on its field.
        page.fill("#id_input", ORDER_INPUT)
        page.fill("#id_catchup_window", "")
        page.click("#save-job")
        page.wait_for_selector("#field-start_at .error")
        errors["start_at"] = page.locator("#field-start_at .error").inner_text()
        page.screenshot(path=str(artifacts_dir / "jobs-14-form-year.png"), full_page=True)

    assert "nested more than 32 levels deep" in errors["input"], errors
    assert "between 0 and 366 days" in errors["catchup_window"], errors
    assert "must be between the years 1970 and 2999" in errors["start_at"], errors
    assert "Nothing was saved" in status
    assert not Job.objects.filter(owner=user).exists()

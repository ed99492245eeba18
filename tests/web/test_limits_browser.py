"""A customer at their active-jobs quota (issue 18), in headless Chromium against the real web
server: the job form says which limit refused it and saves nothing. Screenshot
`limits-01-job-quota.png` in the artifacts folder."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from scheduler.models import Job
from scheduler.services import job_create

from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _sign_in

ORDER_INPUT = '{"items": [{"sku": "SKU-Q", "quantity": 1}], "amount": "3.00", "currency": "EUR"}'


def test_browser__job_form_at_the_active_jobs_quota__refusal_names_the_limit(
    live_db: None, web_server: str, artifacts_dir: Path
) -> None:
    limit = settings.SAS_QUOTAS["ACTIVE_JOBS"]  # the web server runs with the same default
    user = make_user("quotaweb")
    for i in range(limit):
        job_create(
            by_staff=False,
            owner_id=user.pk,
            name=f"job {i}",
            workflow="order_fulfilment",
            input={"items": [{"sku": "SKU-Q", "quantity": 1}], "amount": "3.00", "currency": "EUR"},
            cron="0 3 * * *",
        )

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        page.goto("/jobs/new/")
        page.fill("#id_name", "one too many")
        page.select_option("#id_workflow", "order_fulfilment")
        page.fill("#id_input", ORDER_INPUT)
        page.fill("#id_cron", "0 4 * * *")
        page.click("#save-job")
        page.wait_for_selector("#form-errors")
        errors = page.locator("#form-errors").inner_text()
        page.screenshot(path=str(artifacts_dir / "limits-01-job-quota.png"), full_page=True)

    assert f"You have {limit} active jobs" in errors and f"the limit is {limit} per user" in errors
    assert Job.objects.filter(owner=user).count() == limit

"""The job pages in headless Chromium against the real server and workers: my jobs, the form
with its live next-fire-times preview (and a field error), a job page whose run completed, the
pause banner, and the operators' job admin. Screenshots `jobs-*.png` in the artifacts folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scheduler.models import Job, Run

from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _OVERFLOW_JS, _record_404s, _sign_in

ORDER_INPUT = '{"items": [{"sku": "SKU-J", "quantity": 1}], "amount": "3.00", "currency": "EUR"}'


def _preview(page: Any) -> tuple[str, list[str]]:
    return (
        page.get_attribute("#preview", "data-state") or "",
        page.locator("#preview-times li").all_inner_texts(),
    )


def _wait_preview(page: Any, state: str, *, not_first: str | None = None) -> tuple[str, list[str]]:
    """Wait until the preview is in `state` (and, if given, its first time is not `not_first`)."""
    for _ in range(100):
        seen = _preview(page)
        if seen[0] == state and (not_first is None or (seen[1] and seen[1][0] != not_first)):
            return seen
        page.wait_for_timeout(100)
    raise AssertionError(f"the preview never reached {state}: {_preview(page)}")


def test_browser__jobs__list_form_with_live_preview_job_page_and_admin(
    engine: Any, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("jobweb")
    user.is_staff = user.is_superuser = True
    user.save()

    with open_page(web_server) as page:
        not_found = _record_404s(page)
        _sign_in(page, user.username)
        page.click("text=My jobs")
        page.wait_for_url("**/jobs/")
        empty_text = page.locator("main").inner_text()
        page.screenshot(path=str(artifacts_dir / "jobs-01-empty.png"), full_page=True)

        page.click("#new-job")
        page.wait_for_url("**/jobs/new/")
        page.fill("#id_name", "Nightly restock")
        page.select_option("#id_workflow", "order_fulfilment")
        page.fill("#id_input", ORDER_INPUT)
        # The preview follows the typing: Berlin's 02:30, then New York's.
        page.fill("#id_timezone", "Europe/Berlin")
        page.locator("#id_cron").press_sequentially("30 2 * * *", delay=20)
        berlin = _wait_preview(page, "ok")
        berlin_text = page.locator("#preview-text").inner_text()
        page.screenshot(path=str(artifacts_dir / "jobs-02-form-preview.png"), full_page=True)
        page.fill("#id_timezone", "America/New_York")
        new_york = _wait_preview(page, "ok", not_first=berlin[1][0])
        # The window bounds it, read in the job's zone: "not before" moves the first time on,
        # "not after" can leave none.
        page.fill("#id_start_at", "2030-01-01T00:00")
        windowed = _wait_preview(page, "ok", not_first=new_york[1][0])
        page.fill("#id_end_at", "2030-01-02T00:00")
        for _ in range(100):
            if len(_preview(page)[1]) == 1:
                break
            page.wait_for_timeout(100)
        one_day = _preview(page)
        page.fill("#id_end_at", "2030-01-01T01:00")
        for _ in range(100):
            if "no run between" in page.locator("#preview-text").inner_text():
                break
            page.wait_for_timeout(100)
        empty_window = (_preview(page), page.locator("#preview-text").inner_text())
        page.screenshot(path=str(artifacts_dir / "jobs-02b-form-window.png"), full_page=True)
        page.fill("#id_start_at", "")
        page.fill("#id_end_at", "")
        page.fill("#id_cron", "61 * * * *")
        bad_cron = _wait_preview(page, "error")
        bad_cron_text = page.locator("#preview-text").inner_text()
        page.fill("#id_cron", "*/5 * * * *")
        _wait_preview(page, "ok")
        # A field error from the service, shown on its field; nothing saved.
        page.fill("#id_max_retry", "-1")
        page.click("#save-job")
        page.wait_for_selector("#field-max_retry .error")
        retry_error = page.locator("#field-max_retry .error").inner_text()
        preview_after_error = _wait_preview(page, "ok")  # the returned form previews again
        page.screenshot(path=str(artifacts_dir / "jobs-03-form-error.png"), full_page=True)
        page.fill("#id_max_retry", "1")
        page.click("#save-job")
        page.wait_for_url("**/jobs/*/")
        job_url = page.url

        # Run now (it asks first), then watch the run complete (the page is reloaded to see it).
        dialogs: list[str] = []

        def accept(dialog: Any) -> None:
            dialogs.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        page.click("#run-now-form button")
        page.wait_for_selector("#runs tbody tr")
        for _ in range(150):
            if page.get_attribute("#runs tbody tr", "data-state") == "completed":
                break
            page.wait_for_timeout(200)
            page.goto(job_url)
        run_state = page.get_attribute("#runs tbody tr", "data-state")
        history_states = page.eval_on_selector_all(
            "#history tbody tr", "rows => rows.map(r => r.dataset.status)"
        )
        page.screenshot(path=str(artifacts_dir / "jobs-04-job-page.png"), full_page=True)
        job_overflow = page.evaluate(_OVERFLOW_JS, ".card:has(#runs)")
        facts_overflow = page.evaluate(_OVERFLOW_JS, "aside.card")

        page.click("#runs tbody tr a")
        page.wait_for_selector("#steps")
        run_steps = page.locator("#steps tbody tr").count()
        page.screenshot(path=str(artifacts_dir / "jobs-05-run-page.png"), full_page=True)
        page.goto(job_url)

        page.once("dialog", lambda d: d.accept())
        page.fill("#id_note", "stock count this week")
        page.click("#pause-form button")
        page.wait_for_selector("#paused-banner")
        banner = page.locator("#paused-banner").inner_text()
        paused_row = page.locator("#history tbody tr[data-status=action]").first.inner_text()
        page.screenshot(path=str(artifacts_dir / "jobs-06-paused.png"), full_page=True)

        page.goto("/jobs/")
        row = page.locator("#jobs tbody tr").first
        listed = {
            "state": row.get_attribute("data-state"),
            "schedule": row.locator(".schedule").inner_text(),
            "last": row.locator(".last-run").inner_text(),
            "next": row.locator(".next-run").inner_text(),
        }
        page.screenshot(path=str(artifacts_dir / "jobs-07-list.png"), full_page=True)
        list_overflow = page.evaluate(_OVERFLOW_JS, ".card:has(#jobs)")

        page.goto("/admin/scheduler/job/")
        page.screenshot(path=str(artifacts_dir / "jobs-08-admin-list.png"), full_page=True)
        page.click("#result_list tbody tr th a")
        page.wait_for_selector("#job_form")
        page.screenshot(path=str(artifacts_dir / "jobs-09-admin-job.png"), full_page=True)
        page.click("text=Resume")
        page.wait_for_selector("#sas-confirm-submit")
        page.screenshot(path=str(artifacts_dir / "jobs-10-admin-confirm.png"), full_page=True)
        page.click("#sas-confirm-submit")
        page.wait_for_selector(".messagelist")
        admin_message = page.locator(".messagelist").inner_text()

    assert "No jobs yet" in empty_text
    assert len(berlin[1]) == 5 and all(t.endswith(("+01:00", "+02:00")) for t in berlin[1]), berlin
    assert all(" 02:30 " in t or " 03:00 " in t for t in berlin[1]), berlin
    assert "Europe/Berlin" in berlin_text
    assert len(new_york[1]) == 5 and all(t.endswith(("-05:00", "-04:00")) for t in new_york[1]), new_york
    assert windowed[1][0] == "Tue 2030-01-01 02:30 -05:00" and len(windowed[1]) == 5, windowed
    assert one_day[1] == ["Tue 2030-01-01 02:30 -05:00"], one_day
    assert empty_window[0] == ("ok", []) and "no run between the times given" in empty_window[1], empty_window
    assert bad_cron[1] == [] and "cron" in bad_cron_text
    assert "between 0 and 100" in retry_error
    assert len(preview_after_error[1]) == 5
    assert dialogs and "Run “Nightly restock” now?" in dialogs[0]
    assert run_state == "completed", history_states
    assert "started" in history_states or "succeeded" in history_states, history_states
    assert run_steps == 3
    assert "stock count this week" in banner
    assert f"Paused by user {user.username} (web): stock count this week" in paused_row, paused_row
    assert listed["state"] == "paused" and "*/5 * * * *" in listed["schedule"]
    assert "Completed" in listed["last"] and listed["next"] == "—"  # paused: nothing next
    assert "Resumed 1 job(s)" in admin_message
    assert job_overflow == {"page": 0, "box": 0} and list_overflow == {"page": 0, "box": 0}
    assert facts_overflow == {"page": 0, "box": 0}
    assert not_found == []
    job = Job.objects.get(owner=user)
    assert job.enabled and job.max_retry == 1 and job.timezone == "America/New_York"
    assert Run.objects.filter(job=job, state=Run.State.COMPLETED).count() == 1


def test_browser__job_form__customer_offered_only_customer_work_with_description_and_example(
    live_db: None, web_server: str, artifacts_dir: Path
) -> None:
    """Issue 18: a customer's form offers only the workflows customers may schedule, each with
    what it does and an example input ("use it" copies it); a forged choice of internal work is
    refused on the workflow field, nothing saved. Screenshots `jobs-11-*`, `jobs-12-*`."""
    user = make_user("jobcust")  # not staff

    with open_page(web_server) as page:
        not_found = _record_404s(page)
        _sign_in(page, user.username)
        page.goto("/jobs/new/")
        page.wait_for_selector("#workflow-hint")
        options = page.eval_on_selector_all(
            "#id_workflow option", "os => os.map(o => [o.value, o.textContent])"
        )
        chosen = page.input_value("#id_workflow")
        http_hint = page.locator("#workflow-hint").inner_text()
        http_example = page.locator("#workflow-example-text").inner_text()
        example_visible = page.locator("#workflow-example").is_visible()
        page.click("#use-example")
        copied = page.input_value("#id_input")
        page.screenshot(path=str(artifacts_dir / "jobs-11-form-customer-choices.png"), full_page=True)
        page.select_option("#id_workflow", "order_fulfilment")
        order_hint = page.locator("#workflow-hint").inner_text()
        order_example = page.locator("#workflow-example-text").inner_text()

        # A forged choice (the select edited in the page): the service refuses it on the field.
        page.evaluate(
            """() => { const o = document.createElement('option'); o.value = 'webhook_delivery';
                       o.textContent = 'forged'; document.getElementById('id_workflow').append(o); }"""
        )
        page.select_option("#id_workflow", "webhook_delivery")
        page.fill("#id_name", "forged delivery")
        page.fill(
            "#id_input",
            '{"delivery_id": 1, "url": "http://127.0.0.1:6379/", "body": "x", "headers": {}}',
        )
        page.fill("#id_cron", "* * * * *")
        page.click("#save-job")
        page.wait_for_selector("#field-workflow .error")
        forged_error = page.locator("#field-workflow .error").inner_text()
        forged_shown = page.input_value("#id_workflow")  # shown as posted, marked, not switched
        page.screenshot(path=str(artifacts_dir / "jobs-12-form-forged-refused.png"), full_page=True)

    values = [value for value, _ in options]
    assert "order_fulfilment" in values and "http.call" in values, options
    internal = (
        "webhook_delivery",
        "catalogue.reprice",
        "exports.history_csv",
        "task:webhooks.purge_deliveries",
    )
    assert not set(internal) & set(values), options
    assert not [v for v in values if v.startswith("task:")], options
    assert chosen == "http.call"
    assert "HTTP request" in http_hint and example_visible
    assert json.loads(http_example)["url"].endswith("/echo") and json.loads(copied) == json.loads(
        http_example
    )
    assert "charge the card" in order_hint and json.loads(order_example)["items"], order_example
    assert "'webhook_delivery' is internal: the engine starts it itself" in forged_error
    assert forged_shown == "webhook_delivery"
    assert not Job.objects.filter(owner=user).exists()
    assert not_found == []

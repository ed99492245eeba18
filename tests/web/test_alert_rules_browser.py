"""A customer's alert rules on their job's page in headless Chromium (issue 21, seed 004
per-user alerting): a bad rule refused on its field, a good one added and listed quiet, then
firing after the job's runs failed, then deleted after the confirmation page. Screenshots
`alert-rules-*.png` in the artifacts folder."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from alerting.models import Alert, AlertRule
from alerting.services import alert_rules_evaluate

from ..alerting.conftest import job, run
from ..orders.conftest import make_user
from .conftest import open_page
from .test_browser import _OVERFLOW_JS, _record_404s, _sign_in


def test_browser__job_page_alert_rules__refused_added_firing_deleted(
    live_db: None, web_server: str, artifacts_dir: Path
) -> None:
    alice = make_user("rules")
    j = job(alice, name="nightly export")
    shots = artifacts_dir

    with open_page(web_server) as page:
        not_found = _record_404s(page)
        _sign_in(page, alice.username)
        page.goto(f"/jobs/{j.pk}/")
        page.wait_for_selector("#alert-rule-form")
        empty = page.locator("#no-alert-rules").inner_text()
        page.select_option("#id_kind", "job_consecutive_failures")
        page.fill("#id_threshold", "0")
        page.click("#add-rule")
        page.wait_for_selector("#rule-form-errors")
        threshold_error = page.locator("#field-threshold .error").inner_text()
        page.screenshot(path=str(shots / "alert-rules-01-refused.png"), full_page=True)
        page.fill("#id_threshold", "2")
        page.fill("#id_name", "two failures in a row")
        page.click("#add-rule")
        page.wait_for_selector("#alert-rule-list")
        quiet = page.locator("#alert-rule-list tbody tr").first.get_attribute("data-firing")
        page.screenshot(path=str(shots / "alert-rules-02-added.png"), full_page=True)

    rule = AlertRule.objects.get(owner=alice)
    for i in range(2):
        run(state="compensated", job=j, ago=timedelta(seconds=3 - i))
    alert_rules_evaluate()
    assert Alert.objects.filter(rule=rule, state="firing").count() == 1

    with open_page(web_server) as page:
        not_found += _record_404s(page)
        _sign_in(page, alice.username)
        page.goto(f"/jobs/{j.pk}/#alert-rules")
        page.wait_for_selector("#alert-rule-list tr[data-firing=yes]")
        firing = page.locator("#alert-rule-list tr[data-firing=yes]").inner_text()
        overflow = page.evaluate(_OVERFLOW_JS, "#alert-rules")
        page.screenshot(path=str(shots / "alert-rules-03-firing.png"), full_page=True)
        page.click("#alert-rule-list >> text=Delete")
        page.wait_for_selector("#delete-rule-form")
        page.screenshot(path=str(shots / "alert-rules-04-confirm-delete.png"), full_page=True)
        page.click("#confirm-delete-rule")
        page.wait_for_selector("#no-alert-rules")

    assert "No alert rules" in empty
    assert "a number of runs, 1 to 100" in threshold_error
    assert quiet == "no"
    assert "two failures in a row" in firing and "Firing since" in firing
    assert "its last 2 runs failed" in firing
    assert overflow == {"page": 0, "box": 0}
    assert not AlertRule.objects.filter(owner=alice).exists()
    assert not_found == []

"""The order pages in headless Chromium against a real server, real workers and the simulator.

Screenshots go to the artifacts folder (tests/conftest.py `artifacts_dir`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.models import Run

from ..orders.conftest import make_user
from .conftest import open_page

PASSWORD = "pw-for-tests-1"


def _sign_in(page: Any, username: str, shots: Path | None = None) -> None:
    page.goto("/")
    assert "/accounts/login/" in page.url  # the pages need a signed-in user
    if shots:
        page.screenshot(path=str(shots / "web-01-login.png"))
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url("**/")


def _place_order(page: Any, *, sku: str, quantity: int, amount: str, shots: Path | None = None) -> str:
    page.click("text=Place order")
    page.wait_for_url("**/orders/new/")
    page.fill("#id_items-0-sku", sku)
    page.fill("#id_items-0-quantity", str(quantity))
    page.click("#add-item")
    page.fill("#id_items-1-sku", "SKU-EXTRA")
    page.fill("#id_items-1-quantity", "1")
    page.fill("#id_amount", amount)
    page.select_option("#id_currency", "EUR")
    if shots:
        page.screenshot(path=str(shots / "web-03-order-form.png"), full_page=True)
    page.click("#submit-order")
    page.wait_for_url("**/orders/*/")
    page.evaluate("window.__notReloaded = true")
    return str(page.url.rstrip("/").rsplit("/", 1)[1])


def _watch_until(page: Any, state: str) -> list[str]:
    """Collect the step states the page shows while it updates itself, until the run is `state`."""
    seen: list[str] = []
    for _ in range(300):
        rows = page.eval_on_selector_all("#steps tbody tr", "rows => rows.map(r => r.dataset.state || '')")
        snapshot = ",".join(rows)
        if not seen or seen[-1] != snapshot:
            seen.append(snapshot)
        if page.get_attribute("#run-state", "data-state") == state:
            return seen
        page.wait_for_timeout(100)
    raise AssertionError(f"page never showed {state}; saw {seen}")


def test_browser__sign_in_place_order__watch_it_complete(
    engine: Any, web_server: str, artifacts_dir: Path
) -> None:
    user = make_user("web")

    with open_page(web_server) as page:
        _sign_in(page, user.username, artifacts_dir)
        page.screenshot(path=str(artifacts_dir / "web-02-empty-list.png"))

        # A field error is shown next to its field, and nothing is created.
        page.click("text=Place order")
        page.fill("#id_items-0-sku", "SKU-1")
        page.fill("#id_items-0-quantity", "0")
        page.click("#submit-order")
        quantity_error = page.locator(".item-row .qty .error").inner_text()
        amount_error = page.locator("#id_amount ~ .error").inner_text()
        page.screenshot(path=str(artifacts_dir / "web-04-field-errors.png"), full_page=True)
        page.goto("/")
        errors_created_nothing = "No orders" in page.content()

        order_id = _place_order(page, sku="SKU-1", quantity=2, amount="25.00", shots=artifacts_dir)
        seen = _watch_until(page, "completed")
        page.screenshot(path=str(artifacts_dir / "web-05-order-completed.png"), full_page=True)
        not_reloaded = page.evaluate("window.__notReloaded")
        badge = page.locator("#run-state").inner_text()
        events = page.locator("#events li").count()

        page.goto("/")
        page.screenshot(path=str(artifacts_dir / "web-06-order-list.png"), full_page=True)
        listed = page.locator("#orders").inner_text()

    assert "greater than or equal to 1" in quantity_error
    assert "required" in amount_error
    assert errors_created_nothing
    assert not_reloaded is True  # updated live, not by reloading
    assert seen[-1] == "processed,processed,processed"
    assert len(seen) >= 2, seen  # it was seen moving, not only finished
    assert badge == "Completed" and events == 6
    assert order_id[:8] in listed
    assert Run.objects.get(correlation_id=order_id).state == Run.State.COMPLETED
    assert Run.objects.filter(owner=user).count() == 1


def test_browser__failing_payment__watch_it_compensate(
    engine: Any, web_server: str, artifacts_dir: Path
) -> None:
    engine.sim.set_faults("payment", permanent_rate=1.0)
    user = make_user("web")

    with open_page(web_server) as page:
        _sign_in(page, user.username)
        order_id = _place_order(page, sku="SKU-2", quantity=1, amount="99.90")
        _watch_until(page, "compensated")
        page.screenshot(path=str(artifacts_dir / "web-07-order-compensated.png"), full_page=True)
        states = dict(
            zip(
                page.eval_on_selector_all("#steps tbody tr", "rows => rows.map(r => r.dataset.step)"),
                page.eval_on_selector_all("#steps tbody tr", "rows => rows.map(r => r.dataset.state)"),
                strict=True,
            )
        )
        charge_error = page.locator("#steps tbody tr[data-step=charge_payment] .error-cell").inner_text()
        badge = page.locator("#run-state").inner_text()
        not_reloaded = page.evaluate("window.__notReloaded")
        page.goto("/?state=compensated")
        page.screenshot(path=str(artifacts_dir / "web-08-list-filtered.png"), full_page=True)
        filtered_rows = page.locator("#orders tbody tr").count()

    assert states == {
        "reserve_inventory": "compensated",
        "charge_payment": "error",
        "create_shipment": "cancelled",
        "release_inventory": "processed",
    }
    assert "402" in charge_error
    assert badge == "Compensated" and not_reloaded is True
    assert filtered_rows == 1
    assert Run.objects.get(correlation_id=order_id).state == Run.State.COMPENSATED

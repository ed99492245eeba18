"""The operator's tools (issue 21), each through the Django test client: the confirmation page,
the action, its audit entry on the run's page, and its refusals (wrong state, no permission,
stale form, no reason) - a refusal writes nothing."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.breaker import CircuitBreaker
from ops.models import OperatorAction
from ops.roles import OPERATOR_GROUP, READ_ONLY_GROUP
from scheduler.models import Run, Step

from .factories import (
    claim,
    order_compensated,
    order_completed,
    order_failed,
    order_pending,
    order_running,
    reply,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


def _act(run_id: Any, action: str) -> str:
    return reverse("admin:scheduler_run_act", args=[run_id, action])


def _run_page(client: Client, run_id: Any) -> str:
    return client.get(reverse("admin:scheduler_run_change", args=[run_id])).content.decode()


def order_compensation_struggling(user: Any) -> tuple[Any, Step]:
    """The charge is declined; the release fails once (transient) and waits out its backoff."""
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "permanent", error="card declined")
    reply(claim(order.run_id), "transient", error="inventory answered 503")
    release = Step.objects.get(run_id=order.run_id, name="release_inventory")
    assert release.process_state == "pending" and release.failure_count == 1
    return order, release


def _staff_with(django_user_model: Any, name: str, *perms: str) -> Client:
    user = django_user_model.objects.create_user(name, is_staff=True)
    for perm in perms:
        app_label, codename = perm.split(".")
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label=app_label, codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


# ---------------------------------------------------------------------------------------------
# Resubmit a step in Error
# ---------------------------------------------------------------------------------------------


def test_resubmit_step__refused_for_good__confirm_then_pending_new_key_budget_reset__audited_on_the_run(
    staff_client: Client, customer: Any
) -> None:
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")
    key, failures = release.idempotency_key, release.failure_count
    assert release.process_state == "error"
    page = _run_page(staff_client, failed.run_id)
    assert "Resubmit: Release the items" in page

    confirm = staff_client.get(_act(failed.run_id, "resubmit_step") + f"?step={release.pk}")
    assert confirm.status_code == 200
    html = confirm.content.decode()
    # The release was refused for good: nothing happened under its key, and the remote would
    # replay the refusal for it - it is resubmitted under the next key generation (issue 28).
    assert "new key, generation 2" in html and f"{key}:g2" in html and release.updated_at.isoformat() in html
    assert "the remote refused the last one, so nothing had happened" in html

    done = staff_client.post(
        _act(failed.run_id, "resubmit_step"),
        {
            "step": release.pk,
            "seen": release.updated_at.isoformat(),
            "reason": "inventory fixed the reservation",
        },
    )

    assert done.status_code == 302
    release.refresh_from_db()
    assert (release.process_state, release.failure_count, release.idempotency_key) == (
        "pending",
        0,
        f"{key}:g2",
    )
    assert (release.key_generation, release.error_permanent) == (2, False)
    assert failures >= 0
    assert Run.objects.get(pk=failed.run_id).state == Run.State.COMPENSATING
    entry = OperatorAction.objects.get(run_id=failed.run_id)
    assert (entry.action, entry.step_id, entry.actor_name, entry.reason) == (
        "resubmit_step",
        release.pk,
        "admin:ops",
        "inventory fixed the reservation",
    )
    page = _run_page(staff_client, failed.run_id)
    assert "inventory fixed the reservation" in page and "admin:ops" in page
    assert "Resubmit step (Error -&gt; Pending)" in page


def test_resubmit_step__stale_form__refused_nothing_written(staff_client: Client, customer: Any) -> None:
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")
    shown = release.updated_at.isoformat()
    Step.objects.filter(pk=release.pk).update(updated_at=timezone.now())  # someone changed it since

    refused = staff_client.post(
        _act(failed.run_id, "resubmit_step"), {"step": release.pk, "seen": shown, "reason": "retry"}
    )

    assert refused.status_code == 409
    assert "changed since the page was shown" in refused.content.decode()
    assert Step.objects.get(pk=release.pk).process_state == "error"
    assert Run.objects.get(pk=failed.run_id).state == Run.State.FAILED
    assert not OperatorAction.objects.exists()


def test_resubmit_step__wrong_state_and_no_reason__refused(staff_client: Client, customer: Any) -> None:
    failed = order_failed(customer)
    charge = Step.objects.get(run_id=failed.run_id, name="charge_payment")  # forward, Error
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")

    forward = staff_client.post(
        _act(failed.run_id, "resubmit_step"),
        {"step": charge.pk, "seen": charge.updated_at.isoformat(), "reason": "retry"},
    )
    blank = staff_client.post(
        _act(failed.run_id, "resubmit_step"),
        {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": "  "},
    )

    # The run's compensation has run (the release was tried): the run is what is resubmitted.
    assert forward.status_code == 409 and "resubmit the run (a new run" in forward.content.decode()
    assert blank.status_code == 400 and "reason is required" in blank.content.decode()
    assert Step.objects.get(pk=release.pk).process_state == "error"
    assert not OperatorAction.objects.exists()


def order_declined_nothing_undone(user: Any) -> tuple[Any, Step]:
    """The charge is declined (forward step in Error); its run is Compensating and the release of
    the inventory is Pending, not yet attempted: nothing has been undone."""
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "permanent", error="card declined")
    charge = Step.objects.get(run_id=order.run_id, name="charge_payment")
    release = Step.objects.get(run_id=order.run_id, name="release_inventory")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPENSATING
    assert (charge.process_state, release.process_state, release.attempts) == ("error", "pending", 0)
    return order, charge


def test_resubmit_forward_step__nothing_undone_yet__back_to_pending_in_place_run_goes_on(
    staff_client: Client, customer: Any
) -> None:
    order, charge = order_declined_nothing_undone(customer)
    key = charge.idempotency_key
    page = _run_page(staff_client, order.run_id)
    assert "Resubmit: Charge the card" in page
    confirm = staff_client.get(_act(order.run_id, "resubmit_step") + f"?step={charge.pk}").content.decode()
    assert "compensation is called off" in confirm and key in confirm

    done = staff_client.post(
        _act(order.run_id, "resubmit_step"),
        {"step": charge.pk, "seen": charge.updated_at.isoformat(), "reason": "customer updated the card"},
    )

    assert done.status_code == 302
    run = Run.objects.get(pk=order.run_id)
    assert run.state == Run.State.RUNNING and run.error == ""
    steps = {s.name: s for s in Step.objects.filter(run_id=order.run_id)}
    assert set(steps) == {"reserve_inventory", "charge_payment", "create_shipment"}  # compensation dropped
    assert steps["reserve_inventory"].process_state == "processed"
    assert steps["create_shipment"].process_state == "waiting"
    charge = steps["charge_payment"]
    # Declined for good: the card's refusal is stored under the old key, so the next generation.
    assert (charge.process_state, charge.failure_count, charge.idempotency_key) == ("pending", 0, f"{key}:g2")
    entry = OperatorAction.objects.get(run_id=order.run_id)
    assert (entry.action, entry.step_id, entry.reason) == (
        "resubmit_step",
        charge.pk,
        "customer updated the card",
    )
    assert entry.detail == {
        "in_place": True,
        "compensations_dropped": 1,
        "key_renewed": True,
        "key_generation": 2,
        "idempotency_key": f"{key}:g2",
    }
    assert "customer updated the card" in _run_page(staff_client, order.run_id)
    # The run goes on from the resubmitted step, under its new key, to the end.
    again = claim(order.run_id)
    assert again.step_id == charge.pk
    reply(again, "success")
    reply(claim(order.run_id), "success")
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPLETED


def test_resubmit_forward_step__compensation_started__refused_nothing_written(
    staff_client: Client, customer: Any
) -> None:
    order, charge = order_declined_nothing_undone(customer)
    claim(order.run_id)  # the release is being undone now
    before = {s.pk: (s.process_state, s.updated_at) for s in Step.objects.filter(run_id=order.run_id)}
    assert "Resubmit: Charge the card" not in _run_page(staff_client, order.run_id)

    refused = staff_client.post(
        _act(order.run_id, "resubmit_step"),
        {"step": charge.pk, "seen": charge.updated_at.isoformat(), "reason": "retry"},
    )

    assert refused.status_code == 409 and "nothing has been undone yet" in refused.content.decode()
    assert {s.pk: (s.process_state, s.updated_at) for s in Step.objects.filter(run_id=order.run_id)} == before
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPENSATING
    assert not OperatorAction.objects.exists()


def test_resubmit_forward_step__stale_form__refused_nothing_written(
    staff_client: Client, customer: Any
) -> None:
    order, charge = order_declined_nothing_undone(customer)
    shown = charge.updated_at.isoformat()
    Step.objects.filter(pk=charge.pk).update(updated_at=timezone.now())
    refused = staff_client.post(
        _act(order.run_id, "resubmit_step"), {"step": charge.pk, "seen": shown, "reason": "retry"}
    )
    assert refused.status_code == 409 and "changed since the page was shown" in refused.content.decode()
    assert Run.objects.get(pk=order.run_id).state == Run.State.COMPENSATING
    assert Step.objects.filter(run_id=order.run_id, name="release_inventory").exists()
    assert not OperatorAction.objects.exists()


def test_resubmit_step__no_permission__403_on_page_and_post(
    staff_client: Client, customer: Any, django_user_model: Any
) -> None:
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")
    # May look and operate the old way (change_run), but not resubmit.
    viewer = _staff_with(django_user_model, "viewer", "scheduler.view_run", "scheduler.change_run")

    page = viewer.get(_act(failed.run_id, "resubmit_step") + f"?step={release.pk}")
    post = viewer.post(
        _act(failed.run_id, "resubmit_step"),
        {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": "retry"},
    )

    assert page.status_code == 403 and post.status_code == 403
    assert "Resubmit: Release the items" not in _run_page(viewer, failed.run_id)
    assert Step.objects.get(pk=release.pk).process_state == "error"
    assert not OperatorAction.objects.exists()


# ---------------------------------------------------------------------------------------------
# A compensated run: a new run of the same (or an edited) input, linked
# ---------------------------------------------------------------------------------------------


def test_resubmit_run__new_run_same_input_linked_both_ways(staff_client: Client, customer: Any) -> None:
    order = order_compensated(customer)
    old = Run.objects.get(pk=order.run_id)
    assert "New run of this input" in _run_page(staff_client, old.pk)

    done = staff_client.post(
        _act(old.pk, "resubmit_run"), {"seen": old.updated_at.isoformat(), "reason": "payment is back"}
    )

    entry = OperatorAction.objects.get(action="resubmit_run")
    assert entry.new_run_id is not None
    new = Run.objects.get(pk=entry.new_run_id)
    assert done.status_code == 302 and done["Location"].endswith(f"/{new.pk}/change/")
    assert (new.workflow, new.input, new.owner_id, new.correlation_id) == (
        old.workflow,
        old.input,
        old.owner_id,
        old.correlation_id,
    )
    assert new.state == Run.State.PENDING and entry.run_id == old.pk and entry.detail["input_edited"] is False
    assert "new run <a" in _run_page(staff_client, old.pk)
    assert "resubmission of" in _run_page(staff_client, new.pk)
    # Once: a second resubmission of the same run is refused.
    old.refresh_from_db()
    again = staff_client.post(
        _act(old.pk, "resubmit_run"), {"seen": old.updated_at.isoformat(), "reason": "again"}
    )
    assert again.status_code == 409 and "already resubmitted" in again.content.decode()
    assert Run.objects.count() == 2


def test_resubmit_run__edited_input_validated_like_a_new_submission(
    staff_client: Client, customer: Any
) -> None:
    order = order_compensated(customer)
    old = Run.objects.get(pk=order.run_id)
    bad = dict(old.input, amount="-5")
    seen = old.updated_at.isoformat()

    refused = staff_client.post(
        _act(old.pk, "resubmit_run"), {"seen": seen, "reason": "fix amount", "input": json.dumps(bad)}
    )
    not_json = staff_client.post(
        _act(old.pk, "resubmit_run"), {"seen": seen, "reason": "x", "input": "{nope"}
    )

    assert refused.status_code == 400 and "the input is not valid" in refused.content.decode()
    assert not_json.status_code == 400 and "not JSON" in not_json.content.decode()
    assert Run.objects.count() == 1 and not OperatorAction.objects.exists()

    edited = dict(old.input, amount="20.00")
    ok = staff_client.post(
        _act(old.pk, "resubmit_run"),
        {"seen": seen, "reason": "charge less", "input": json.dumps(edited)},
    )
    assert ok.status_code == 302
    entry = OperatorAction.objects.get(action="resubmit_run")
    assert entry.detail["input_edited"] is True and entry.new_run_id is not None
    assert Run.objects.get(pk=entry.new_run_id).input["amount"] == "20.00"


def test_resubmit_run__not_compensated__refused(staff_client: Client, customer: Any) -> None:
    done = order_completed(customer)
    run = Run.objects.get(pk=done.run_id)
    refused = staff_client.post(
        _act(run.pk, "resubmit_run"), {"seen": run.updated_at.isoformat(), "reason": "again"}
    )
    assert refused.status_code == 409 and "only a compensated run" in refused.content.decode()
    assert Run.objects.count() == 1


# ---------------------------------------------------------------------------------------------
# Compensate on purpose; retry a failing compensation; mark one done by hand
# ---------------------------------------------------------------------------------------------


def test_compensate_on_purpose__running_run_compensating__completed_refused__stale_refused(
    staff_client: Client, customer: Any
) -> None:
    running = Run.objects.get(pk=order_running(customer).run_id)
    completed = Run.objects.get(pk=order_completed(customer).run_id)
    stale = Run.objects.get(pk=order_running(customer).run_id)
    Run.objects.filter(pk=stale.pk).update(updated_at=timezone.now())

    ok = staff_client.post(
        _act(running.pk, "compensate"), {"seen": running.updated_at.isoformat(), "reason": "fraud suspected"}
    )
    wrong = staff_client.post(
        _act(completed.pk, "compensate"), {"seen": completed.updated_at.isoformat(), "reason": "x"}
    )
    old = staff_client.post(
        _act(stale.pk, "compensate"), {"seen": stale.updated_at.isoformat(), "reason": "x"}
    )

    assert ok.status_code == 302
    running.refresh_from_db()
    assert running.state == Run.State.COMPENSATING and "fraud suspected" in running.error
    assert not running.cancel_requested  # it ends Compensated, not Cancelled
    assert wrong.status_code == 409 and "only a pending or running run" in wrong.content.decode()
    assert old.status_code == 409 and "changed since" in old.content.decode()
    assert Run.objects.get(pk=stale.pk).state == Run.State.RUNNING
    assert list(OperatorAction.objects.values_list("run_id", "action")) == [(running.pk, "compensate_run")]


def test_retry_compensation__due_now_count_reset__audited(staff_client: Client, customer: Any) -> None:
    order, release = order_compensation_struggling(customer)
    assert release.not_before > timezone.now() - timedelta(milliseconds=1) or release.failure_count == 1
    assert "Retry now: Release the items" in _run_page(staff_client, order.run_id)

    ok = staff_client.post(
        _act(order.run_id, "retry_compensation"),
        {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": "inventory redeployed"},
    )

    assert ok.status_code == 302
    release.refresh_from_db()
    assert release.failure_count == 0 and release.not_before <= timezone.now()
    assert OperatorAction.objects.get().action == "retry_compensation"
    # Again, with the old form: stale.
    again = staff_client.post(
        _act(order.run_id, "retry_compensation"),
        {"step": release.pk, "seen": "2020-01-01T00:00:00+00:00", "reason": "again"},
    )
    assert again.status_code == 409 and OperatorAction.objects.count() == 1


def test_retry_compensation__step_not_failing__wrong_state(staff_client: Client, customer: Any) -> None:
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")  # Error, not Pending
    refused = staff_client.post(
        _act(failed.run_id, "retry_compensation"),
        {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": "x"},
    )
    assert refused.status_code == 409 and "waiting to retry" in refused.content.decode()
    assert not OperatorAction.objects.exists()


def test_mark_done__reason_mandatory_then_done__run_compensated__audited(
    staff_client: Client, customer: Any
) -> None:
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")
    url = _act(failed.run_id, "mark_done")
    assert staff_client.get(url + f"?step={release.pk}").status_code == 200

    blank = staff_client.post(url, {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": ""})
    assert blank.status_code == 400
    assert Step.objects.get(pk=release.pk).process_state == "error"

    done = staff_client.post(
        url, {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": "released in the WMS"}
    )

    assert done.status_code == 302
    assert Step.objects.get(pk=release.pk).process_state == "processed"
    assert Run.objects.get(pk=failed.run_id).state == Run.State.COMPENSATED
    entry = OperatorAction.objects.get()
    assert (entry.action, entry.reason) == ("mark_compensation_done", "released in the WMS")
    again = staff_client.post(
        url,
        {"step": release.pk, "seen": Step.objects.get(pk=release.pk).updated_at.isoformat(), "reason": "x"},
    )
    assert again.status_code == 409 and OperatorAction.objects.count() == 1


# ---------------------------------------------------------------------------------------------
# Breakers by hand
# ---------------------------------------------------------------------------------------------


def test_breaker_hold_open_then_closed__shared_state__audited(staff_client: Client) -> None:
    url = reverse("admin:scheduler_run_breaker_hold", args=["payment"])
    breaker = CircuitBreaker("payment")
    try:
        assert staff_client.get(url).status_code == 200
        bad = staff_client.post(url, {"state": "open", "minutes": 0, "reason": "x"})
        assert bad.status_code == 400 and breaker.snapshot()["state"] == "closed"

        opened = staff_client.post(url, {"state": "open", "minutes": 10, "reason": "provider maintenance"})

        assert opened.status_code == 302
        snap = breaker.snapshot()
        assert snap["state"] == "open" and snap["by_hand"] == "admin:ops"
        assert 590 < float(snap["open_until"]) - time.time() <= 600
        assert not breaker.allow().allowed

        closed = staff_client.post(url, {"state": "closed", "minutes": 5, "reason": "it is back"})
        assert closed.status_code == 302 and breaker.allow().allowed
        for _ in range(10):  # held closed: failures are counted but do not open it
            assert breaker.record_failure() == "closed"
        assert list(OperatorAction.objects.order_by("id").values_list("action", "target", "reason")) == [
            ("breaker_open", "payment", "provider maintenance"),
            ("breaker_close", "payment", "it is back"),
        ]
        unknown = staff_client.post(
            reverse("admin:scheduler_run_breaker_hold", args=["nope"]),
            {"state": "open", "minutes": 1, "reason": "x"},
        )
        assert unknown.status_code == 403
    finally:
        breaker.reset()


# ---------------------------------------------------------------------------------------------
# Bulk: dry run first, then do it
# ---------------------------------------------------------------------------------------------


def test_bulk_resubmit__dry_run_changes_nothing__then_does_exactly_what_it_showed(
    staff_client: Client, customer: Any
) -> None:
    hit_a = order_compensated(customer)
    hit_b = order_compensated(customer)
    other = order_compensated(customer, error="card declined")
    failed = order_failed(customer)  # its charge: "card declined" too, its release in Error
    url = reverse("admin:scheduler_run_bulk_resubmit")
    now = timezone.now()
    window = {
        "match": "service unavailable",
        "since": (now - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M"),
        "until": (now + timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M"),
    }

    dry = staff_client.get(url, window)

    assert dry.status_code == 200
    html = dry.content.decode()
    assert "Dry run: 2 to resubmit, 2 found" in html
    assert str(hit_a.run_id)[-8:] in html and str(hit_b.run_id)[-8:] in html
    assert str(other.run_id)[-8:] not in html and str(failed.run_id)[-8:] not in html
    assert Run.objects.count() == 4 and not OperatorAction.objects.exists()  # the dry run wrote nothing
    tokens = dry.context["planned"]

    done = staff_client.post(
        url,
        {"match": "service unavailable", "reason": "payment outage over", "token": [i.token for i in tokens]},
    )

    assert done.status_code == 200 and "2 resubmitted, 0 refused" in done.content.decode()
    links = dict(OperatorAction.objects.filter(action="resubmit_run").values_list("run_id", "new_run_id"))
    assert set(links) == {hit_a.run_id, hit_b.run_id}
    assert Run.objects.count() == 6
    bulk = OperatorAction.objects.get(action="bulk_resubmit")
    assert bulk.detail == {"rows": 2, "done": 2, "refused": 0} and "service unavailable" in bulk.target
    # The same confirmation again (a double click, or a stale page): every row refused.
    again = staff_client.post(
        url, {"match": "service unavailable", "reason": "again", "token": [i.token for i in tokens]}
    )
    assert "0 resubmitted, 2 refused" in again.content.decode() and Run.objects.count() == 6


def test_bulk_resubmit__bad_window_and_no_permission(
    staff_client: Client, customer: Any, django_user_model: Any
) -> None:
    url = reverse("admin:scheduler_run_bulk_resubmit")
    bad = staff_client.get(url, {"match": "x", "since": "2026-01-02 00:00", "until": "2026-01-01 00:00"})
    assert bad.status_code == 400 and "must be after" in bad.content.decode()
    viewer = _staff_with(django_user_model, "viewer", "scheduler.view_run")
    assert viewer.get(url).status_code == 403
    assert viewer.post(url, {"reason": "x", "token": ["run:x:y"]}).status_code == 403
    assert not OperatorAction.objects.exists()


# ---------------------------------------------------------------------------------------------
# Roles
# ---------------------------------------------------------------------------------------------


def _in_group(django_user_model: Any, name: str, group: str) -> Client:
    user = django_user_model.objects.create_user(name, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


def test_roles__read_only_sees_everything_and_cannot_act_by_any_post(
    customer: Any, django_user_model: Any
) -> None:
    reader = _in_group(django_user_model, "reader", READ_ONLY_GROUP)
    failed = order_failed(customer)
    running = Run.objects.get(pk=order_running(customer).run_id)
    compensated = Run.objects.get(pk=order_compensated(customer).run_id)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")
    before = {r.pk: (r.state, r.updated_at) for r in Run.objects.all()}

    # Sees: the run list, a run page, engine health, the sweep's dry run.
    assert reader.get(reverse("admin:scheduler_run_changelist")).status_code == 200
    page = _run_page(reader, failed.run_id)
    assert "Resubmit" not in page and "Mark done: Release the items" not in page and "Cancel run" not in page
    assert "Resume compensation" not in page
    assert reader.get(reverse("admin:scheduler_run_health")).status_code == 200
    assert reader.get(reverse("admin:scheduler_run_sweep_preview")).status_code == 200

    # Cannot act: every action URL, by POST, answers 403 and changes nothing.
    posts: list[tuple[str, dict[str, Any]]] = [
        (_act(failed.run_id, "resubmit_step"), {"step": release.pk, "seen": release.updated_at.isoformat()}),
        (_act(failed.run_id, "mark_done"), {"step": release.pk, "seen": release.updated_at.isoformat()}),
        (
            _act(failed.run_id, "retry_compensation"),
            {"step": release.pk, "seen": release.updated_at.isoformat()},
        ),
        (_act(running.pk, "compensate"), {"seen": running.updated_at.isoformat()}),
        (_act(compensated.pk, "resubmit_run"), {"seen": compensated.updated_at.isoformat()}),
        (reverse("admin:scheduler_run_bulk_resubmit"), {"token": [f"run:{compensated.pk}:x"]}),
        (reverse("admin:scheduler_run_breaker_hold", args=["payment"]), {"state": "open", "minutes": 5}),
        (reverse("admin:scheduler_run_breaker_reset", args=["payment"]), {}),
        (reverse("admin:scheduler_run_operate", args=[running.pk, "cancel"]), {}),
        (reverse("admin:scheduler_run_operate", args=[failed.run_id, "resume"]), {}),
        (_act(running.pk, "cancel"), {"seen": running.updated_at.isoformat()}),
        (_act(failed.run_id, "resume"), {"seen": before[failed.run_id][1].isoformat()}),
    ]
    for url, data in posts:
        response = reader.post(url, {**data, "reason": "I should not be able to"})
        assert response.status_code == 403, url
    # The changelist's actions are not offered either; posting one is refused.
    listed = reader.post(
        reverse("admin:scheduler_run_changelist"),
        {"action": "cancel_runs", "_selected_action": [str(running.pk)]},
    )
    assert listed.status_code in (200, 302, 403)
    assert {r.pk: (r.state, r.updated_at) for r in Run.objects.all()} == before
    assert not OperatorAction.objects.exists()
    assert CircuitBreaker("payment").snapshot()["state"] == "closed"


def test_roles__operator_group_may_act__staff_in_no_group_sees_nothing(
    customer: Any, django_user_model: Any
) -> None:
    operator = _in_group(django_user_model, "op", OPERATOR_GROUP)
    nobody = _in_group(django_user_model, "nobody", READ_ONLY_GROUP)
    nobody_user = django_user_model.objects.get(username="nobody")
    nobody_user.groups.clear()
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")

    ok = operator.post(
        _act(failed.run_id, "resubmit_step"),
        {"step": release.pk, "seen": release.updated_at.isoformat(), "reason": "fixed"},
    )

    assert ok.status_code == 302 and OperatorAction.objects.get().actor_name == "admin:op"
    assert operator.get(reverse("admin:scheduler_run_bulk_resubmit")).status_code == 200
    assert nobody.get(reverse("admin:scheduler_run_changelist")).status_code == 403
    assert nobody.get(reverse("admin:scheduler_run_sweep_preview")).status_code == 403
    read_only = set(Group.objects.get(name=READ_ONLY_GROUP).permissions.values_list("codename", flat=True))
    operators = set(Group.objects.get(name=OPERATOR_GROUP).permissions.values_list("codename", flat=True))
    assert "view_run" in read_only and "view_sweep_preview" in read_only
    assert not {p for p in read_only if not p.startswith("view_")}
    assert {
        "resubmit_step",
        "compensate_run",
        "retry_compensation",
        "mark_compensation_done",
        "operate_breaker",
        "bulk_resubmit",
        "change_run",
    } <= operators


# ---------------------------------------------------------------------------------------------
# The dry run of the next sweep
# ---------------------------------------------------------------------------------------------


def test_sweep_preview__retry_error_requeue_leave_with_why__changes_nothing(
    staff_client: Client, customer: Any
) -> None:
    past = timezone.now() - timedelta(seconds=30)
    # Started by its agent (no start-by left), no reply by complete-by: retried.
    retried = order_running(customer)
    Step.objects.filter(run_id=retried.run_id, process_state="processing").update(
        start_by=None, complete_by=past
    )
    # The same, at its last failure: errored.
    errored = order_running(customer)
    Step.objects.filter(run_id=errored.run_id, process_state="processing").update(
        start_by=None, complete_by=past, failure_count=2, max_failures=3
    )
    # Claimed, no agent ever started it (no start mark in Redis), start-by passed: requeued.
    requeued = order_pending(customer)
    claim(requeued.run_id)
    Step.objects.filter(run_id=requeued.run_id, process_state="processing").update(start_by=past)
    # Claimed just now: left.
    left = order_pending(customer)
    claim(left.run_id)
    before = list(Step.objects.order_by("id").values_list("id", "process_state", "lease", "failure_count"))

    page = staff_client.get(reverse("admin:scheduler_run_sweep_preview"))

    assert page.status_code == 200
    items = {i.run_id: i for i in page.context["preview"].items}
    assert items[str(retried.run_id)].decision == "retry"
    assert "failure 1 of 3: retried after" in items[str(retried.run_id)].why
    assert items[str(errored.run_id)].decision == "error"
    assert "failure 3 of 3: gives up" in items[str(errored.run_id)].why
    assert items[str(requeued.run_id)].decision == "requeue"
    assert "not started by" in items[str(requeued.run_id)].why
    assert items[str(left.run_id)].decision == "leave"
    assert page.context["preview"].due == 3
    html = page.content.decode()
    assert "3 due: " in html and 'data-decision="requeue"' in html
    assert (
        list(Step.objects.order_by("id").values_list("id", "process_state", "lease", "failure_count"))
        == before
    )


def test_bulk_resubmit__declined_card_marked_and_left_out__the_checkbox_picks_it(
    staff_client: Client, customer: Any
) -> None:
    declined = order_compensated(customer, error='payment refused (402): {"error":"card_declined"}')
    outage = order_compensated(customer, error='payment refused (422): {"error":"rejected"}')
    url = reverse("admin:scheduler_run_bulk_resubmit")
    now = timezone.now()
    window = {
        "match": "payment refused",
        "since": (now - timedelta(hours=1)).strftime("%Y-%m-%d %H:%M"),
        "until": (now + timedelta(minutes=5)).strftime("%Y-%m-%d %H:%M"),
    }

    dry = staff_client.get(url, window)
    picked = staff_client.get(url, {**window, "include_repeats": "on"})

    html = dry.content.decode()
    assert "Dry run: 1 to resubmit, 2 found, 1 would be refused again" in html
    assert "would be refused again (card_declined)" in html
    assert "Include refusals that would be refused again" in html
    assert [i.run_id for i in dry.context["planned"]] == [str(outage.run_id)]
    assert {i.run_id for i in picked.context["planned"]} == {str(declined.run_id), str(outage.run_id)}
    assert "would be refused again (card_declined)</strong>: included" in picked.content.decode()
    assert not OperatorAction.objects.exists()  # dry runs write nothing


def test_resume_compensation__confirm_page_shows_each_steps_key__history_says_generation_2(
    staff_client: Client, customer: Any
) -> None:
    failed = order_failed(customer)
    release = Step.objects.get(run_id=failed.run_id, name="release_inventory")
    run = Run.objects.get(pk=failed.run_id)

    page = staff_client.get(_act(failed.run_id, "resume")).content.decode()
    done = staff_client.post(
        _act(failed.run_id, "resume"), {"seen": run.updated_at.isoformat(), "reason": "inventory fixed"}
    )

    assert "new key, generation 2" in page and f"{release.idempotency_key}:g2" in page
    assert done.status_code == 302
    release.refresh_from_db()
    assert (release.process_state, release.key_generation) == ("pending", 2)
    history = release.history.get(kind="operator")
    assert history.detail["note"] == (
        "resubmitted under a new idempotency key (generation 2): the remote refused the last one, "
        "so nothing had happened"
    )
    assert history.detail["note"] in _run_page(staff_client, failed.run_id)

"""One selector says which operator actions fit a run (issue 27): a run in each state gets exactly
the fitting actions as buttons on its admin page, the confirmation page of any other action
answers 409 without a form, and the audited service refuses it ("state") and writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from ops import run_services
from ops.audit import OperatorRefused
from ops.models import OperatorAction
from ops.run_actions import ACTIONS, run_actions_fitting
from scheduler.models import Run, Step
from tests.admin.factories import (
    claim,
    order_compensated,
    order_completed,
    order_failed,
    order_failed_refund,
    order_pending,
    order_running,
    reply,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]

Fits = set[tuple[str, str]]  # (action, step name or "")


def _compensating_nothing_undone(user: Any) -> Any:
    order = order_pending(user)
    reply(claim(order.run_id), "success")
    reply(claim(order.run_id), "permanent", error="card declined")
    return order


def _compensation_struggling(user: Any) -> Any:
    order = _compensating_nothing_undone(user)
    reply(claim(order.run_id), "transient", error="inventory answered 503")
    return order


def _compensated_and_resubmitted(user: Any) -> Any:
    order = order_compensated(user)
    run = Run.objects.get(pk=order.run_id)
    operator = type(user).objects.get(username="ops")
    run_services.run_resubmit(run_id=run.pk, user=operator, reason="again", seen=run.updated_at)
    return order


# Each run state an operator meets, and exactly what fits it.
SCENARIOS: dict[str, tuple[Callable[[Any], Any], Fits]] = {
    "pending": (order_pending, {("cancel", ""), ("compensate", "")}),
    "running": (order_running, {("cancel", ""), ("compensate", "")}),
    "completed": (order_completed, set()),
    "failed": (
        order_failed,
        {("resume", ""), ("resubmit_step", "release_inventory"), ("mark_done", "release_inventory")},
    ),
    "failed_refund": (
        order_failed_refund,
        {
            ("resume", ""),
            ("resubmit_step", "refund_payment"),
            ("mark_done", "refund_payment"),
            ("mark_done", "release_inventory"),
        },
    ),
    "compensating_nothing_undone": (
        _compensating_nothing_undone,
        {("give_up", ""), ("resubmit_step", "charge_payment"), ("mark_done", "release_inventory")},
    ),
    "compensation_struggling": (
        _compensation_struggling,
        {("give_up", ""), ("retry_compensation", "release_inventory"), ("mark_done", "release_inventory")},
    ),
    "compensated": (order_compensated, {("resubmit_run", "")}),
    "compensated_resubmitted": (_compensated_and_resubmitted, set()),
}


def _buttons(client: Client, run: Run) -> Fits:
    page = client.get(reverse("admin:scheduler_run_change", args=[run.pk]))
    assert page.status_code == 200
    return {(b["action"], b["step"]) for b in page.context["operator_buttons"]}


def _rows(run: Run) -> tuple[Any, ...]:
    return (
        tuple(Run.objects.order_by("pk").values_list("pk", "state", "updated_at")),
        tuple(Step.objects.order_by("pk").values_list("pk", "process_state", "updated_at", "failure_count")),
        OperatorAction.objects.count(),
    )


def _call(action: str, run: Run, step: Step | None, user: Any) -> OperatorAction:
    if action == "resubmit_run":
        return run_services.run_resubmit(run_id=run.pk, user=user, reason="why", seen=run.updated_at)
    if step is None:
        return run_services.run_operate(
            action=action, run_id=run.pk, user=user, reason="why", seen=run.updated_at
        )
    service = {
        "resubmit_step": run_services.step_resubmit_by_operator,
        "retry_compensation": run_services.step_compensation_retry_by_operator,
        "mark_done": run_services.step_compensation_mark_done_by_operator,
    }[action]
    return service(step_id=step.pk, user=user, reason="why", seen=step.updated_at)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_run_in_each_state__buttons_are_exactly_the_fitting_actions__others_refused(
    scenario: str, staff_client: Client, operator: Any, customer: Any
) -> None:
    make, expected = SCENARIOS[scenario]
    run = Run.objects.get(pk=make(customer).run_id)

    assert {(f.action, f.step.name if f.step else "") for f in run_actions_fitting(run=run)} == expected
    assert _buttons(staff_client, run) == expected

    steps = list(Step.objects.filter(run_id=run.pk).order_by("seq", "id"))
    for action, spec in ACTIONS.items():
        for step in steps if spec.on_step else [None]:
            if (action, step.name if step else "") in expected:
                continue
            url = reverse("admin:scheduler_run_act", args=[run.pk, action])
            page = staff_client.get(url + (f"?step={step.pk}" if step else ""))
            assert page.status_code == 409, (action, step)
            assert b'id="operator-form"' not in page.content, (action, step)
            before = _rows(run)
            with pytest.raises(OperatorRefused) as refused:
                _call(action, Run.objects.get(pk=run.pk), step and Step.objects.get(pk=step.pk), operator)
            assert refused.value.code == "state", (action, step, str(refused.value))
            assert _rows(run) == before, (action, step)


def test_fitting_action__page_offers_the_form__service_acts(
    staff_client: Client, operator: Any, customer: Any
) -> None:
    run = Run.objects.get(pk=order_running(customer).run_id)
    page = staff_client.get(reverse("admin:scheduler_run_act", args=[run.pk, "cancel"]))
    assert page.status_code == 200 and b'id="operator-form"' in page.content
    entry = _call("cancel", run, None, operator)
    assert entry.action == OperatorAction.Action.CANCEL_RUN
    assert not {f.action for f in run_actions_fitting(run=Run.objects.get(pk=run.pk))} & {
        "cancel",
        "compensate",
    }


def test_buttons__read_only_user__none_though_actions_fit(customer: Any, django_user_model: Any) -> None:
    from django.contrib.auth.models import Group

    from ops.roles import READ_ONLY_GROUP

    reader = django_user_model.objects.create_user("reader", is_staff=True)
    reader.groups.add(Group.objects.get(name=READ_ONLY_GROUP))
    run = Run.objects.get(pk=order_failed(customer).run_id)
    client = Client()
    client.force_login(reader)

    assert run_actions_fitting(run=run) and not run_actions_fitting(run=run, user=reader)
    assert _buttons(client, run) == set()

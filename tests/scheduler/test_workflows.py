"""Workflow definitions: step labels, the names people read."""

from __future__ import annotations

from scheduler.workflows import StepDef, Workflow


def test_step_label__not_given__derived_from_the_name() -> None:
    assert StepDef(name="reserve_inventory", operation="x").label == "Reserve inventory"


def test_step_label__given__kept_for_the_step_and_its_compensation() -> None:
    undo = StepDef(name="refund_payment", operation="y", label="Refund the card")
    step = StepDef(name="charge_payment", operation="x", label="Charge the card", compensation=undo)
    workflow = Workflow(name="labels-test", steps=[step])

    assert workflow.step_label("charge_payment") == "Charge the card"
    assert workflow.step_label("refund_payment") == "Refund the card"
    # A step the definition no longer has (a run submitted before it changed): its name, readable.
    assert workflow.step_label("ship_parcel") == "Ship parcel"

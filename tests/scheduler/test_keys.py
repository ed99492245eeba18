"""The idempotency key rule of issue 28 (scheduler/keys.py): which steps renew their key, how
the key of a generation is made, and which refusals would come back whatever the key."""

from __future__ import annotations

import pytest

from scheduler.keys import (
    idempotency_key_base,
    idempotency_key_of,
    refusal_of,
    step_key_choice,
    step_key_renewable,
    step_refusal_repeats,
)
from scheduler.models import Step


def _step(**fields: object) -> Step:
    base = {"pk": 7, "name": "charge_payment", "idempotency_key": "r:charge_payment", "key_generation": 1}
    return Step(**{**base, **fields})


@pytest.mark.parametrize(
    ("state", "permanent", "renewable"),
    [
        ("error", True, True),  # refused for good: nothing happened under the key
        ("error", False, False),  # errored after timeouts / 5xx: something may have happened
        ("pending", False, False),  # a compensation waiting out its backoff
        ("pending", True, False),  # not in Error: nothing to resubmit under a new key
    ],
)
def test_step_key_renewable__only_a_definitive_refusal(state: str, permanent: bool, renewable: bool) -> None:
    assert step_key_renewable(_step(process_state=state, error_permanent=permanent)) is renewable


def test_key_generations__first_unchanged__next_suffixed__base_recovered() -> None:
    assert idempotency_key_of(base="r:s", generation=1) == "r:s"
    assert idempotency_key_of(base="r:s", generation=3) == "r:s:g3"
    assert idempotency_key_base(key="r:s:g3", generation=3) == "r:s"
    # A step named like a suffix keeps its name: the base is cut by the generation, not a pattern.
    assert idempotency_key_base(key="r:g2", generation=1) == "r:g2"
    with pytest.raises(ValueError, match="not of generation 3"):
        idempotency_key_base(key="r:s:g2", generation=3)
    with pytest.raises(ValueError, match="below 1"):
        idempotency_key_of(base="r:s", generation=0)


def test_step_key_choice__renewed_twice__kept_when_ambiguous() -> None:
    first = step_key_choice(_step(process_state="error", error_permanent=True))
    assert (first.renewed, first.key, first.generation) == (True, "r:charge_payment:g2", 2)
    assert first.note.startswith("resubmitted under a new idempotency key (generation 2)")
    second = step_key_choice(
        _step(process_state="error", error_permanent=True, idempotency_key=first.key, key_generation=2)
    )
    assert (second.key, second.generation) == ("r:charge_payment:g3", 3)
    kept = step_key_choice(_step(process_state="error", error_permanent=False))
    assert (kept.renewed, kept.key, kept.generation) == (False, "r:charge_payment", 1)


def test_refusal_of__agents_texts__and_anything_else_none() -> None:
    assert refusal_of('payment refused (402): {"error":"card_declined"}') == refusal_of(
        'POST https://x.test/pay answered 402: {"error": "card_declined"}'
    )
    found = refusal_of('inventory refused (409): {"error":"out_of_stock"}')
    assert found is not None and (found.status, found.code) == (409, "out_of_stock")
    assert refusal_of("payment refused (422): not json") is not None
    assert refusal_of("payment answered 503: {}") is None
    assert refusal_of("payment timed out after 3.00s") is None
    assert refusal_of('payment refused (402): {"error": ' + "[" * 5000 + "}") is not None  # no crash


def test_step_refusal_repeats__declared_input_refusals_of_the_order_workflow_only() -> None:
    declined = _step(
        process_state="error",
        error_permanent=True,
        last_error='payment refused (402): {"error":"card_declined"}',
    )
    rejected = _step(
        process_state="error", error_permanent=True, last_error='payment refused (422): {"error":"rejected"}'
    )
    refund = _step(
        name="refund_payment",
        process_state="error",
        error_permanent=True,
        last_error='payment refused (402): {"error":"card_declined"}',
    )
    timed_out = _step(
        process_state="error",
        error_permanent=False,
        last_error='payment refused (402): {"error":"card_declined"}',
    )
    assert step_refusal_repeats(declined, workflow="order_fulfilment") == "card_declined"
    assert step_refusal_repeats(rejected, workflow="order_fulfilment") == ""
    assert step_refusal_repeats(refund, workflow="order_fulfilment") == ""  # a compensation's is fixable
    assert step_refusal_repeats(timed_out, workflow="order_fulfilment") == ""
    assert step_refusal_repeats(declined, workflow="no_such_workflow") == ""

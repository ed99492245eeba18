"""The reprice workflow's logic on the harness (sastools.testkit, issue 31): its paged step runs
through the real state machine and database, the agent's body in-process, no broker and no
worker: every page checkpointed, each product repriced once. The live tests
(tests/e2e/test_long_steps_live.py) keep what needs processes: a worker killed or frozen
mid-page."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest
from django.conf import settings

from catalogue.models import Product
from catalogue.services import catalogue_seed, reprice_submit
from sastools.testkit import Harness
from scheduler.models import Checkpoint, Run, Step

PAGE = int(settings.SAS["CATALOGUE_PAGE_SIZE"])


@pytest.fixture
def staff(django_user_model: Any) -> Any:
    return django_user_model.objects.create(username="reprice-flow", is_staff=True)


def test_reprice__two_and_a_half_pages__every_product_once_pages_checkpointed(
    harness: Harness, staff: Any
) -> None:
    catalogue_seed(rows=PAGE * 2 + PAGE // 2)
    before = dict(Product.objects.values_list("pk", "price"))

    run = reprice_submit(owner_id=staff.pk, by_staff=True, percent="10")
    harness.settle()

    assert harness.run(run).state == Run.State.COMPLETED
    after = dict(Product.objects.values_list("pk", "price"))
    # PostgreSQL's round(numeric): halves away from zero.
    expected = {
        pk: (p * Decimal("1.10")).quantize(Decimal("0.01"), ROUND_HALF_UP) for pk, p in before.items()
    }
    assert after == expected
    assert set(Product.objects.values_list("repriced_count", flat=True)) == {1}
    (step,) = Step.objects.filter(run_id=run.pk, kind=Step.Kind.FORWARD)
    checkpoint = Checkpoint.objects.get(step=step)
    assert (checkpoint.pages_done, checkpoint.rows_done, checkpoint.completed) == (3, len(before), True)
    assert step.process_state == Step.State.PROCESSED

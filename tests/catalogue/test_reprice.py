"""The catalogue reprice's pages in-process on the real PostgreSQL (the test plays the
scheduler; the agent's page code runs here): what one page writes, and that a page whose
transaction fails writes nothing. The same under real workers and kill -9: tests/e2e."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection, transaction

from catalogue.models import Product, RepriceLedger
from catalogue.services import catalogue_seed, reprice_submit
from catalogue.tasks import reprice
from ops.roles import OPERATOR_GROUP
from scheduler.models import Checkpoint, Run, Step, TaskExecutionHistory
from scheduler.services import step_claim_due
from scheduler.workflows import WorkflowInputError
from tests.roles import staff_in

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("manual_scheduler")]


@pytest.fixture
def user(django_user_model):
    # Repricing the shared catalogue is staff work: an "Operators" member.
    return staff_in("carol", OPERATOR_GROUP)


def _claim(run):
    with transaction.atomic():
        (claim,) = step_claim_due(instance="test", limit=1, run_id=run.id)
    return claim


def _first_ids(n):
    return list(Product.objects.order_by("id").values_list("id", flat=True)[:n])


@pytest.mark.parametrize("percent", ["0", "abc", "-95", "1e3", "5.123", True, None])
def test_reprice_submit__bad_percent__field_error_and_nothing_written(user, percent):
    with pytest.raises(WorkflowInputError) as caught:
        reprice_submit(owner_id=user.id, by_staff=True, percent=percent)

    assert "percent" in caught.value.errors
    assert not Run.objects.exists()


def test_seed__generate_series__adds_the_rows_once_if_empty():
    assert catalogue_seed(rows=2500, if_empty=True) == 2500
    assert catalogue_seed(rows=2500, if_empty=True) == 0
    assert Product.objects.count() == 2500 and Product.objects.filter(price__lte=0).count() == 0


def test_page__applies_one_page_and_moves_the_checkpoint_in_one_transaction(user):
    catalogue_seed(rows=2500)
    prices = dict(Product.objects.values_list("id", "price"))
    run = reprice_submit(owner_id=user.id, by_staff=True, percent="10")
    claim = _claim(run)

    assert reprice.perform_page(**claim.message()) == "accepted"  # its continue reply

    page = _first_ids(1000)
    changed = Product.objects.filter(repriced_count=1)
    assert sorted(changed.values_list("id", flat=True)) == page
    first = Product.objects.get(pk=page[0])
    assert first.price == (prices[page[0]] * Decimal("1.10")).quantize(Decimal("0.01"))
    assert first.last_repriced_run == run.id
    (ledger,) = RepriceLedger.objects.filter(run_id=run.id)
    assert (ledger.page_start, ledger.page_end, ledger.rows) == (0, page[-1], 1000)
    checkpoint = Checkpoint.objects.get(run=run)
    assert (checkpoint.page_start, checkpoint.pages_done, checkpoint.total) == (page[-1], 1, 2500)
    step = Step.objects.get(pk=claim.step_id)
    assert step.process_state == "processing" and str(step.lease) != claim.lease  # the next page


def test_page__its_transaction_fails_midway__leaves_no_partial_effect(user):
    catalogue_seed(rows=2500)
    run = reprice_submit(owner_id=user.id, by_staff=True, percent="10")
    claim = _claim(run)
    # The 500th product of the first page refuses its update: rows before it were already
    # updated in the page's transaction when it fails.
    poisoned = _first_ids(500)[-1]
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.id = {int(poisoned)} THEN RAISE EXCEPTION 'poisoned product'; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER test_poison BEFORE UPDATE ON catalogue_product
            FOR EACH ROW EXECUTE FUNCTION test_poison();
            """
        )

    assert reprice.perform_page(**claim.message()) == "accepted"  # its transient reply
    outcome_step = Step.objects.get(pk=claim.step_id)

    assert Product.objects.filter(repriced_count__gt=0).count() == 0
    assert Product.objects.exclude(last_repriced_run=None).count() == 0
    assert not RepriceLedger.objects.exists()
    checkpoint = Checkpoint.objects.get(run=run)
    assert (checkpoint.page_start, checkpoint.pages_done, checkpoint.rows_done) == (0, 0, 0)
    assert outcome_step.process_state == "pending" and outcome_step.failure_count == 1
    assert "poisoned product" in outcome_step.last_error
    attempt = TaskExecutionHistory.objects.get(step_id=claim.step_id, kind="attempt")
    assert attempt.status == "failed_transient"


def test_commands__seed_then_reprice__a_run_of_the_user(user):
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("catalogue_seed", rows=1500, if_empty=True, stdout=out)
    call_command("catalogue_reprice", percent="-2.5", user=user.username, stdout=out)

    run = Run.objects.get(owner=user, workflow="catalogue.reprice")
    assert run.input == {"percent": "-2.5"} and Product.objects.count() == 1500
    assert f"/catalogue/reprices/{run.pk}/" in out.getvalue()
    with pytest.raises(CommandError, match="percent"):
        call_command("catalogue_reprice", percent="0", user=user.username, stdout=out)


def test_job__dispatcher_fires_a_reprice_in_bulk__checkpoint_written_and_first_page_applied(user):
    # The demo's hourly reprice job, fired by the jobs dispatcher: its runs are written in bulk
    # (runs_insert_many), which must write the paginated step's Checkpoint as run_submit does.
    from scheduler.services import job_create, jobs_dispatch

    catalogue_seed(rows=1500)
    job = job_create(
        by_staff=True,
        owner_id=user.id,
        name="reprice now",
        workflow="catalogue.reprice",
        input={"percent": "2"},
    )

    assert jobs_dispatch(instance="test").started == 1
    run = Run.objects.get(job=job)
    checkpoint = Checkpoint.objects.get(run=run)
    assert (checkpoint.page_size, checkpoint.page_start, checkpoint.completed) == (1000, 0, False)
    claim = _claim(run)
    assert reprice.perform_page(**claim.message()) == "accepted"
    assert Product.objects.filter(repriced_count=1, last_repriced_run=run.id).count() == 1000
    assert Checkpoint.objects.get(run=run).pages_done == 1

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db import connection

from orders.models import Order
from orders.services import order_submit
from sastools.harness import wait_for
from scheduler.models import Run, Step

ORDER = {"items": [{"sku": "SKU-1", "quantity": 2}], "amount": "25.00", "currency": "EUR"}


def submit_order(user: Any, **overrides: Any) -> Order:
    return order_submit(owner_id=user.id, data={**ORDER, **overrides})


def wait_run(run_id: Any, states: tuple[str, ...], timeout: float = 30.0) -> Run:
    def check() -> Run | None:
        run = Run.objects.get(pk=run_id)
        return run if run.state in states else None

    return wait_for(check, timeout=timeout, what=f"run {run_id} to reach {states}")


def step(run_id: Any, name: str) -> Step:
    return Step.objects.get(run_id=run_id, name=name)


def wait_step_state(run_id: Any, name: str, state: str, timeout: float = 20.0) -> Step:
    return wait_for(
        lambda: Step.objects.filter(run_id=run_id, name=name, process_state=state).first(),
        timeout=timeout,
        what=f"step {name} of {run_id} to be {state}",
    )


# ---------------------------------------------------------------------------------------------
# The catalogue reprice (issue 9): "each page applied exactly once", read straight from the
# tables, on whichever database the run used (the session's test database or a private server).
# ---------------------------------------------------------------------------------------------

Query = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]


def django_query(sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


# A product's seeded price (catalogue_seed: product n costs 1 + (n * 7919 mod 99900) / 100, ids
# from 1 after TRUNCATE ... RESTART IDENTITY) repriced exactly once by `percent`.
_REPRICE_AUDIT = """
SELECT count(*),
       count(*) FILTER (WHERE repriced_count = 1 AND last_repriced_run = %s::uuid),
       count(*) FILTER (
           WHERE price <> round((1 + (id * 7919 %% 99900) / 100.0) * (100 + %s::numeric) / 100, 2)
       ),
       min(id), max(id)
FROM catalogue_product
"""


def assert_repriced_once(query: Query, *, run_id: str, percent: str, rows: int, page_size: int) -> None:
    """Every product repriced exactly once, by this run (its counter, and its price: the seeded
    price changed by `percent` once); the ledger holds each page once, contiguous from the first
    product to the last; the checkpoint says exactly what the ledger says."""
    ((products, once, wrong_prices, first, last),) = query(_REPRICE_AUDIT, (run_id, percent))
    assert (products, once, wrong_prices) == (rows, rows, 0)
    pages = query(
        "SELECT page_start, page_end, rows FROM catalogue_repriceledger WHERE run_id = %s::uuid"
        " ORDER BY page_start, id",
        (run_id,),
    )
    sizes = [min(page_size, rows - done) for done in range(0, rows, page_size)]
    assert [p[2] for p in pages] == sizes
    assert [p[0] for p in pages] == [0] + [p[1] for p in pages[:-1]]  # contiguous, none twice
    assert pages[0][1] == first + page_size - 1 and pages[-1][1] == last
    ((pages_done, rows_done, total, completed, page_start),) = query(
        "SELECT pages_done, rows_done, total, completed, page_start FROM scheduler_checkpoint"
        " WHERE run_id = %s::uuid",
        (run_id,),
    )
    assert (pages_done, rows_done, total, completed, page_start) == (len(sizes), rows, rows, True, last)


def attempt_statuses(query: Query, run_id: str) -> list[str]:
    """The run's attempts' statuses, oldest first."""
    rows = query(
        "SELECT status FROM scheduler_taskexecutionhistory WHERE run_id = %s::uuid AND kind = 'attempt'"
        " ORDER BY id",
        (run_id,),
    )
    return [str(r[0]) for r in rows]


def stall_once(query: Query, *, product_id: int, seconds: float) -> None:
    """A page that hangs in the database: the first UPDATE of product `product_id` sleeps
    `seconds` inside the page's statement (a BEFORE UPDATE trigger), with the page's rows before
    it already written. Once only, so the page's next attempt runs at full speed: a sequence
    decides (no rollback takes a sequence back) - and, as a crash may take back a sequence
    step that no commit flushed, only in the server's run it was installed in."""
    ((started,),) = query("SELECT pg_postmaster_start_time()::text", ())
    query("CREATE SEQUENCE test_stall_once", ())
    query(
        f"""
        CREATE FUNCTION test_stall() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.id = {int(product_id)} AND pg_postmaster_start_time() = '{started}' THEN
                IF nextval('test_stall_once') = 1 THEN PERFORM pg_sleep({float(seconds)}); END IF;
            END IF;
            RETURN NEW;
        END $$
        """,
        (),
    )
    query(
        "CREATE TRIGGER test_stall BEFORE UPDATE ON catalogue_product"
        " FOR EACH ROW EXECUTE FUNCTION test_stall()",
        (),
    )


def stall_remove(query: Query) -> None:
    """Drop the stall, and end a statement still sleeping in it (a failed test's)."""
    query(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event = 'PgSleep'",
        (),
    )
    for statement in (
        "DROP TRIGGER IF EXISTS test_stall ON catalogue_product",
        "DROP FUNCTION IF EXISTS test_stall()",
        "DROP SEQUENCE IF EXISTS test_stall_once",
    ):
        query(statement, ())


def stalled_lease(query: Query, run_id: str) -> str | None:
    """The lease of the run's step while its page's statement sleeps in the stall, else None."""
    rows = query(
        "SELECT s.lease::text FROM scheduler_step s WHERE s.run_id = %s::uuid AND EXISTS ("
        " SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep')",
        (run_id,),
    )
    return str(rows[0][0]) if rows and rows[0][0] else None

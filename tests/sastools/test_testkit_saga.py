"""The harness's four saga tests (issue 31): success; a timeout then a retry; exhausted
retries then compensation in reverse order; recovery after an agent lost mid-call. No broker,
no worker process; each prints its time (the four together: under 2 s)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sastools.testkit import Harness, answer, hang, refuse, time_out, timed
from scheduler.models import Run, Step, TaskExecutionHistory

from .saga import POLICY, SAGA, SERVICES


@pytest.fixture
def trip(harness: Harness, request: pytest.FixtureRequest) -> Iterator[Harness]:
    for service in SERVICES:
        harness.remote(service, default=answer({"ok": True}))
    with timed(request.node.name):
        yield harness


def _calls(h: Harness) -> list[str]:
    return [f"{c.service}{c.path}:{c.behaviour}" for c in h.remotes.calls]


def test_saga__all_services_answer__completes_in_order(trip: Harness) -> None:
    run = trip.submit(SAGA, {"traveller": "ada"})
    trip.settle()
    assert trip.run(run).state == Run.State.COMPLETED
    assert _calls(trip) == ["flight/book:answer", "hotel/book:answer", "car/book:answer"]
    keys = [c.idempotency_key for c in trip.remotes.calls]
    assert len(set(keys)) == 3
    assert [s.process_state for s in trip.steps(run) if s.kind == Step.Kind.FORWARD] == [
        Step.State.PROCESSED
    ] * 3


def test_saga__hotel_times_out_once__retried_after_backoff_and_completes(trip: Harness) -> None:
    trip.remote("hotel").script("/book", time_out(), answer({"room": 12}))
    started = trip.clock.now()
    run = trip.submit(SAGA, {"traveller": "ada"})
    trip.settle()
    assert trip.run(run).state == Run.State.COMPLETED
    hotel = trip.remotes.called("hotel", "/book")
    assert [c.behaviour for c in hotel] == ["time_out", "answer"]
    assert hotel[0].idempotency_key == hotel[1].idempotency_key  # the same booking, asked again
    # The retry came after the attempt's window had passed and the step's backoff: the clock
    # jumped both, no real wait.
    assert (hotel[1].at - hotel[0].at).total_seconds() >= POLICY["timeout"] - 1
    step = next(s for s in trip.steps(run) if s.name == "book_hotel")
    assert step.failure_count == 1 and step.result == {"room": 12}
    statuses = list(
        TaskExecutionHistory.objects.filter(step=step).order_by("id").values_list("status", flat=True)
    )
    assert statuses == [
        TaskExecutionHistory.Status.TIMED_OUT,  # the supervisor's verdict at complete-by
        TaskExecutionHistory.Status.RETRY_SCHEDULED,  # back to Pending after the backoff
        TaskExecutionHistory.Status.SUCCEEDED,
    ]
    assert (trip.clock.now() - started).total_seconds() >= POLICY["timeout"]


def test_saga__car_times_out_every_attempt__compensates_in_reverse_order(trip: Harness) -> None:
    trip.remote("car").script("/book", *[time_out()] * POLICY["max_failures"])
    run = trip.submit(SAGA, {"traveller": "ada"})
    trip.settle()
    assert trip.run(run).state == Run.State.COMPENSATED
    assert _calls(trip) == [
        "flight/book:answer",
        "hotel/book:answer",
        *["car/book:time_out"] * POLICY["max_failures"],
        # The car's booking may have been made (its calls reached the service and timed out):
        # it is undone too, then the hotel's and the flight's - the reverse order.
        "car/cancel:answer",
        "hotel/cancel:answer",
        "flight/cancel:answer",
    ]
    car = next(s for s in trip.steps(run) if s.name == "book_car")
    assert car.failure_count == POLICY["max_failures"] and car.error_permanent is False
    assert car.process_state == Step.State.COMPENSATED  # Error, then undone
    # Each cancellation names the booking it undoes (the forward step's idempotency key).
    booked = {c.path: c.idempotency_key for c in trip.remotes.called("hotel")}
    assert trip.remotes.called("hotel", "/cancel")[0].body == {"booking": booked["/book"]}


def test_saga__payment_refused__compensates_without_retrying(trip: Harness) -> None:
    trip.remote("car").script("/book", refuse(409, "no_cars_left"))
    run = trip.submit(SAGA, {"traveller": "ada"})
    trip.settle()
    assert trip.run(run).state == Run.State.COMPENSATED
    assert _calls(trip)[2:] == ["car/book:refuse", "hotel/cancel:answer", "flight/cancel:answer"]


def test_saga__agent_lost_mid_call__supervisor_recovers_and_completes(trip: Harness) -> None:
    trip.remote("hotel").script("/book", hang())
    run = trip.submit(SAGA, {"traveller": "ada"})
    trip.settle()
    assert trip.run(run).state == Run.State.COMPLETED
    hotel = trip.remotes.called("hotel", "/book")
    assert [c.behaviour for c in hotel] == ["hang", "answer"]
    assert hotel[0].idempotency_key == hotel[1].idempotency_key
    assert [d.outcome for d in trip.deliveries if d.name == "book_hotel"] == ["lost", "accepted"]
    step = next(s for s in trip.steps(run) if s.name == "book_hotel")
    first = TaskExecutionHistory.objects.filter(step=step).order_by("id").first()
    assert first is not None and first.status == TaskExecutionHistory.Status.TIMED_OUT
    assert "no reply before complete_by" in first.error  # the supervisor's verdict

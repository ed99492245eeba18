"""Property tests (Hypothesis) on every validator and service that takes outside input (issue
22, "Bad input, tried for real"): whatever a client sends, the answer is a value or the
validator's own refusal - never another exception - and a refused service writes nothing.

Bounded: a few hundred examples per property, no deadline (the machine is shared); the file
runs in well under a minute.
"""

from __future__ import annotations

import ipaddress
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import override_settings
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agents.egress import UrlRefused, is_public
from orders.models import Order
from orders.workflows import MAX_AMOUNT, AmountError, amount_parse, validate_order_input
from scheduler.dispatcher.cron import cron_error, cron_next, zone_error
from scheduler.limits import LimitExceeded
from scheduler.messages import agent_request_problem, reply_problem
from scheduler.models import Job, Run
from scheduler.workflows import WorkflowInputError
from webhooks.destinations import webhook_url_check
from webhooks.signing import signature_compute, signature_verify

FAST = settings(max_examples=300, deadline=None)
DB = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# JSON as a client may send it: any nesting of the JSON types, odd strings included.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
order_like = st.fixed_dictionaries(
    {},
    optional={
        "items": st.lists(
            st.fixed_dictionaries(
                {}, optional={"sku": json_values | st.text(max_size=70), "quantity": json_values}
            ),
            max_size=4,
        )
        | json_values,
        "amount": json_values
        | st.decimals(allow_nan=True)
        | st.text(alphabet="0123456789.-+eE ", max_size=12),
        "currency": st.sampled_from(["EUR", "USD", "JPY", "eur", "", "XXX"]) | json_values,
        "card": json_values,
        "order_id": json_values,
    },
).flatmap(lambda d: st.dictionaries(st.text(max_size=8), json_values, max_size=2).map(lambda e: {**e, **d}))


# -- orders --------------------------------------------------------------------------------------


@FAST
@given(
    value=json_values | st.decimals() | st.text(alphabet="0123456789.-+eE_ ", max_size=20),
    currency=st.sampled_from([None, "EUR", "JPY", "USD"]),
)
def test_amount_parse__anything__amount_in_range_or_amount_error(value: Any, currency: str | None) -> None:
    try:
        amount = amount_parse(value, currency=currency)
    except AmountError as exc:
        message = str(exc)
    else:
        assert isinstance(amount, Decimal) and 0 < amount <= MAX_AMOUNT
        return
    assert message


@FAST
@given(data=order_like)
def test_validate_order_input__anything__clean_or_field_errors(data: dict[str, Any]) -> None:
    try:
        clean = validate_order_input(data)
    except WorkflowInputError as exc:
        errors = exc.errors
    else:
        assert clean["items"] and clean["currency"] == data["currency"]
        assert 0 < Decimal(clean["amount"]) <= MAX_AMOUNT
        return
    assert errors and all(isinstance(v, list) and v for v in errors.values())


@pytest.mark.django_db
@DB
@given(
    data=order_like, callback=st.text(max_size=60) | st.sampled_from(["http://127.0.0.1/x", "http://[::1]/"])
)
@example(data={"items": [{"sku": "A\x00", "quantity": 1}], "amount": "1.00", "currency": "EUR"}, callback="")
def test_order_submit__anything__order_or_refusal_nothing_written(
    django_user_model: Any, data: Any, callback: str
) -> None:
    from orders.services import order_submit

    user, _ = django_user_model.objects.get_or_create(username="prop")
    before = (Order.objects.count(), Run.objects.count())
    try:
        order_submit(owner_id=user.id, data=data, callback_url=callback)
    except (WorkflowInputError, ValidationError, LimitExceeded):
        assert (Order.objects.count(), Run.objects.count()) == before
        return
    assert Order.objects.count() == before[0] + 1


# -- cron and zones --------------------------------------------------------------------------------

cron_fields = st.sampled_from(
    ["*", "*/5", "0", "1-5", "MON-FRI", "L", "15W", "1#2", "5L", "?", "60", "-1", "a", ""]
)
cron_text = (
    st.lists(cron_fields, min_size=0, max_size=7).map(" ".join)
    | st.text(max_size=30)
    | st.sampled_from(["@daily", "@hourly", "@reboot", "@yearly", "0 0 30 2 *", "0 2 * * *", "30 1 * * *"])
)
zones = st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Asia/Kathmandu"])


@FAST
@given(
    expression=cron_text,
    zone=zones,
    after=st.datetimes(
        min_value=datetime(1990, 1, 1), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)
    ),
)
def test_cron__anything__error_or_next_strictly_later(expression: str, zone: str, after: datetime) -> None:
    error = cron_error(expression)
    if error is not None:
        assert isinstance(error, str) and error
        return
    nxt = cron_next(expression, zone, after)
    assert nxt is None or (nxt > after and nxt.tzinfo is not None)
    if nxt is not None:
        # Through a DST change too: the next after the next is later still (no loop, no repeat).
        again = cron_next(expression, zone, nxt)
        assert again is None or again > nxt


@FAST
@given(
    name=st.text(max_size=40)
    | st.sampled_from(["Europe/Paris", "../../etc/passwd", "UTC\x00", " UTC", "Etc/GMT+14"])
)
def test_zone_error__anything__none_or_message(name: str) -> None:
    assert zone_error(name) is None or "unknown time zone" in zone_error(name)


@pytest.mark.django_db
@DB
@given(
    name=st.text(max_size=300),
    workflow=st.sampled_from(["http_call", "order_fulfilment", "task", "nope", ""]) | st.text(max_size=20),
    job_input=st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    cron=cron_text,
    zone=zones | st.text(max_size=12),
    numbers=st.fixed_dictionaries(
        {},
        optional={
            "max_retry": st.integers(),
            "jitter": st.integers(),
            "priority": st.integers(),
            "max_firings": st.integers(),
        },
    ),
)
@example(name="a\x00b", workflow="nope", job_input={}, cron="", zone="UTC", numbers={})
def test_job_create__anything__job_or_refusal_nothing_written(
    django_user_model: Any, name: str, workflow: str, job_input: Any, cron: str, zone: str, numbers: Any
) -> None:
    from scheduler.services import job_create

    user, _ = django_user_model.objects.get_or_create(username="prop")
    before = Job.objects.count()
    try:
        job_create(
            owner_id=user.id,
            by_staff=False,
            name=name,
            workflow=workflow,
            input=job_input,
            cron=cron,
            timezone_name=zone,
            **numbers,
        )
    except (WorkflowInputError, ValidationError, LimitExceeded):
        assert Job.objects.count() == before
        return
    assert Job.objects.count() == before + 1


# -- webhooks ------------------------------------------------------------------------------------


@FAST
@given(
    url=st.text(max_size=80)
    | st.builds(
        lambda scheme, host, port, path: f"{scheme}://{host}{port}{path}",
        st.sampled_from(["http", "https", "HTTP", "ftp", "javascript", ""]),
        st.sampled_from(
            [
                "127.0.0.1",
                "localhost",
                "[::1]",
                "10.0.0.1",
                "169.254.169.254",
                "0.0.0.0",
                "[::ffff:127.0.0.1]",
                "2130706433",
                "0x7f.1",
                "127.1",
                "foo.localhost",
                "example.com",
                "[fd00::1]",
                "192.168.1.1",
                "user@example.com",
                "exa mple.com",
                "xn--e1afmkfd.xn--p1ai",
                "EXAMPLE.COM.",
                "[::]",
            ]
        ),
        st.sampled_from(["", ":80", ":0", ":65536", ":-1", ":abc", ":443"]),
        st.sampled_from(["", "/", "/hook", "/a/../b", "#frag", "?q=1", "\\x"]),
    )
)
def test_callback_url__anything__normalised_public_url_or_refused(url: str) -> None:
    # The production default: no private callback hosts (the tests' own allow the simulator).
    try:
        with override_settings(SAS_CALLBACK_PRIVATE_HOSTS=[]):
            checked = webhook_url_check(url=url)
    except (UrlRefused, ValidationError):
        return
    from urllib.parse import urlsplit

    host = urlsplit(checked).hostname or ""
    assert checked.startswith(("http://", "https://"))
    assert host != "localhost" and not host.endswith(".localhost")
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    assert is_public(address), checked


@FAST
@given(
    secret=st.text(min_size=1, max_size=20),
    body=st.binary(max_size=64),
    header=st.text(max_size=80),
    timestamp=st.integers(min_value=0, max_value=10**11),
)
@example(secret="s", body=b"", header="t=\u00b2,v1=ab", timestamp=0)  # "²".isdigit(): was a ValueError
def test_signature_verify__anything__bool_and_only_the_real_signature(
    secret: str, body: bytes, header: str, timestamp: int
) -> None:
    try:
        secret.encode()
    except UnicodeEncodeError:
        return  # secrets are ours (secrets.token_urlsafe), never a client's text
    assert signature_verify(secret=secret, body=body, header=header, now=timestamp) in (True, False)
    real = signature_compute(secret=secret, body=body, timestamp=timestamp)
    assert signature_verify(secret=secret, body=body, header=real, now=timestamp)
    assert not signature_verify(secret=secret, body=body + b"x", header=real, now=timestamp)
    assert not signature_verify(secret=secret, body=body, header=real, now=timestamp + 301)


# -- engine messages -------------------------------------------------------------------------------


@FAST
@given(
    args=st.lists(json_values, max_size=2),
    kwargs=st.dictionaries(
        st.sampled_from(
            [
                "step_id",
                "lease",
                "complete_by",
                "start_by",
                "timeout",
                "idempotency_key",
                "payload",
                "attempt",
                "heartbeat",
                "outcome",
                "result",
                "error",
                "worker",
                "retry_after",
                "reached",
                "x",
            ]
        ),
        json_values,
        max_size=9,
    )
    | json_values,
)
def test_message_checks__anything__problem_or_none_never_raise(args: Any, kwargs: Any) -> None:
    for check in (agent_request_problem, reply_problem):
        problem = check(args, kwargs)
        assert problem is None or isinstance(problem, str)
        if args or not isinstance(kwargs, dict):
            assert problem is not None


# -- operator actions ----------------------------------------------------------------------------


@pytest.mark.django_db
@DB
@given(ids=st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=5))
def test_alert_acknowledge__any_ids__count_of_existing_only(django_user_model: Any, ids: list[int]) -> None:
    from alerting.models import Alert
    from alerting.transitions import alert_acknowledge

    operator, _ = django_user_model.objects.get_or_create(username="prop-ops", defaults={"is_staff": True})
    existing = set(
        Alert.objects.filter(pk__in=ids, acknowledged_at__isnull=True).values_list("pk", flat=True)
    )
    assert alert_acknowledge(alert_ids=ids, user=operator) == len(existing)


@pytest.mark.django_db
@DB
@given(
    changes=st.fixed_dictionaries(
        {},
        optional={
            "name": st.text(max_size=250),
            "input": st.dictionaries(st.text(max_size=10), json_values, max_size=3) | json_values,
            "cron": cron_text,
            "timezone_name": zones | st.text(max_size=12),
            "max_retry": st.integers(),
            "jitter": st.integers(),
            "priority": st.integers(),
            "max_firings": st.integers() | st.none(),
            "overlap_policy": st.text(max_size=10) | st.sampled_from(["skip", "queue", "allow"]),
            "idempotent": json_values,
        },
    )
)
@example(changes={"name": "x\x00"})
@example(changes={"input": {"x": "\x00"}})
def test_job_update__any_editable_values__edit_or_refusal_nothing_changed(
    django_user_model: Any, changes: dict[str, Any]
) -> None:
    from scheduler.services import job_create, job_update
    from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

    register_engine_workflow()
    user, _ = django_user_model.objects.get_or_create(username="prop-edit")
    job = Job.objects.filter(owner=user).first() or job_create(
        owner_id=user.id,
        by_staff=False,
        name="edited",
        workflow=ENGINE_WORKFLOW,
        input=ENGINE_INPUT,
        cron="*/5 * * * *",
    )
    before = Job.objects.filter(pk=job.pk).values().get()
    try:
        job_update(job_id=job.pk, by_staff=False, actor="prop", **changes)
    except (WorkflowInputError, ValidationError, LimitExceeded):
        assert Job.objects.filter(pk=job.pk).values().get() == before


# -- operator actions (ops/run_services.py) ---------------------------------------------------

OPERATOR_ACTIONS = (
    "step_resubmit_by_operator",
    "run_resubmit",
    "run_compensate_by_operator",
    "step_compensation_retry_by_operator",
    "step_compensation_mark_done_by_operator",
)
reasons = st.text(max_size=40) | st.sampled_from(
    ["", "   ", "x" * 2001, "ok\x00", "\u202eevil", "refund\nmade"]
)


def _engine_rows() -> list[tuple[Any, ...]]:
    from ops.models import OperatorAction
    from scheduler.models import Step

    return [
        *Run.objects.order_by("pk").values_list("pk", "state", "updated_at"),
        *Step.objects.order_by("pk").values_list("pk", "process_state", "updated_at", "failure_count"),
        ("audit", OperatorAction.objects.count()),
    ]


@pytest.mark.django_db
@DB
@given(
    action=st.sampled_from(OPERATOR_ACTIONS),
    target=st.sampled_from(["run", "step", "compensation"])
    | st.integers(min_value=-(2**63), max_value=2**63 - 1),
    reason=reasons,
    seen_real=st.booleans(),
    seen_other=st.datetimes(timezones=st.just(UTC)),
)
@example(
    action="run_compensate_by_operator",
    target="run",
    reason="ok\x00",
    seen_real=True,
    seen_other=datetime(2000, 1, 1, tzinfo=UTC),
)
def test_operator_actions__any_target_reason_and_seen__action_or_refusal_nothing_changed(
    django_user_model: Any, action: str, target: Any, reason: str, seen_real: bool, seen_other: datetime
) -> None:
    from ops import run_services as operator
    from ops.audit import REASON_MAX, OperatorRefused
    from ops.models import OperatorAction
    from scheduler.models import Step
    from tests.engine_workflow import register_engine_workflow, submit

    register_engine_workflow()
    user, _ = django_user_model.objects.get_or_create(username="prop-operator", defaults={"is_staff": True})
    run = Run.objects.filter(owner=user).first() or submit(user)
    step = Step.objects.filter(run=run).order_by("pk").first()
    undo = Step.objects.filter(run=run, compensates__isnull=False).order_by("pk").first() or step
    run_action = action in ("run_resubmit", "run_compensate_by_operator")
    real: Run | Step | None
    if run_action:
        ident: Any = (
            run.pk if target == "run" else uuid.UUID(int=target % 2**128 if isinstance(target, int) else 0)
        )
        real = Run.objects.filter(pk=ident).first()
    else:
        rows = {"step": step, "compensation": undo, "run": None}
        ident = rows[target].pk if isinstance(target, str) and rows[target] else target
        ident = ident if isinstance(ident, int) else 0
        real = Step.objects.filter(pk=ident).first()
    seen = real.updated_at if (seen_real and real is not None) else seen_other
    kwargs = {"run_id" if run_action else "step_id": ident, "user": user, "reason": reason, "seen": seen}

    before = _engine_rows()
    refused: OperatorRefused | None = None
    try:
        entry = getattr(operator, action)(**kwargs)
    except OperatorRefused as exc:
        refused = exc
    if refused is not None:
        assert refused.code in ("state", "stale", "reason", "input"), refused.code
        assert str(refused)
        assert _engine_rows() == before  # refused: nothing written
        return
    # Done: only with a reason, the row as it was shown, and an audit entry of it.
    assert reason.strip() and len(reason.strip()) <= REASON_MAX
    assert seen_real and isinstance(entry, OperatorAction)
    assert OperatorAction.objects.filter(pk=entry.pk).exists()

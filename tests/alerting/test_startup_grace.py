"""A clean restart pages nobody (issue 27): for SAS_ALERT_STARTUP_GRACE seconds after the
evaluator's process started, the dead man's switch and "a queue with work and no consumer" are
not evaluated - and an incident already open is left as it is, neither resolved nor paged again.
The other kinds are evaluated as ever. Real PostgreSQL and Redis, the evaluator in-process (its
process started long before the grace set here runs out)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from alerting.models import Alert
from alerting.services import alert_rules_evaluate
from liveness.last_run import last_run_key, last_run_record

from .conftest import rule, run

pytestmark = pytest.mark.usefixtures("no_rules")


@pytest.fixture
def restarted(settings: Any, redis_client: Any) -> Any:
    """What a clean restart looks like to the evaluator: the sweep's last run as old as the
    downtime (an hour), work waiting in a queue whose workers are not up yet."""
    settings.REDIS_PREFIX = f"{settings.REDIS_PREFIX}grace-{uuid.uuid4().hex[:8]}:"
    redis_client.hset(last_run_key(), "supervisor.sweep", str(timezone.now().timestamp() - 3600))
    prefix = django_settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "")
    queue = f"gracetest{uuid.uuid4().hex[:8]}.q"
    redis_client.lpush(f"{prefix}{queue}", "{}")
    deadman = rule(
        "periodic_not_run", name="Supervisor not running", target="sas: supervisor sweep", threshold=5
    )
    no_consumer = rule("queue_no_consumer", target=queue)
    yield deadman, no_consumer
    redis_client.delete(f"{prefix}{queue}")


def test_within_the_grace__dead_mans_switch_and_no_consumer_silent__other_kinds_evaluated(
    settings: Any, restarted: Any
) -> None:
    deadman, no_consumer = restarted
    other = rule("run_needs_operator")
    run(state="failed")
    settings.SAS_ALERT_STARTUP_GRACE = 3600
    assert alert_rules_evaluate().ran
    assert not Alert.objects.filter(rule__in=[deadman, no_consumer]).exists()
    assert Alert.objects.get(rule=other).state == "firing"

    settings.SAS_ALERT_STARTUP_GRACE = 0  # the grace over: the restart really left them down
    assert alert_rules_evaluate().ran
    assert Alert.objects.get(rule=deadman).state == "firing"
    assert Alert.objects.get(rule=no_consumer).state == "firing"


def test_within_the_grace__an_incident_open_before__neither_resolved_nor_paged_again(
    settings: Any, restarted: Any, redis_client: Any
) -> None:
    deadman, _ = restarted
    assert alert_rules_evaluate().ran
    before = Alert.objects.get(rule=deadman)
    assert before.state == "firing"
    settings.SAS_ALERT_STARTUP_GRACE = 3600
    last_run_record(task="supervisor.sweep")  # would resolve it, were it evaluated
    assert alert_rules_evaluate().ran
    after = Alert.objects.get(rule=deadman)
    assert (after.state, after.count, after.announced_state) == ("firing", before.count, "firing")

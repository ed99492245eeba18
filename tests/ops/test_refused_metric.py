"""/metrics exports the agents' refused requests (issue 26): `sas_agent_requests_refused_total`,
by operation and reason, from the Redis hash the agents add to (liveness/counters.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from liveness import counters as engine_metrics

from .test_metrics_live import metrics_settings, scrape, value  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db


@pytest.mark.usefixtures("metrics_settings")
def test_metrics__refused_agent_requests_by_operation_and_reason(redis_client: Any):
    redis_client.delete(engine_metrics.refused_key())
    for _ in range(3):
        engine_metrics.agent_request_refused(operation="agents.payment.refund", reason="not_held")
    engine_metrics.agent_request_refused(operation="agents.payment.charge", reason="malformed")

    samples = scrape(Client())

    name = "sas_agent_requests_refused_total"
    assert value(samples, name, operation="agents.payment.refund", reason="not_held") == 3
    assert value(samples, name, operation="agents.payment.charge", reason="malformed") == 1
    redis_client.delete(engine_metrics.refused_key())

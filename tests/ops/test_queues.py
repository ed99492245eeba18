"""The engine's queue list (settings.SAS_QUEUES = CELERY_TASK_QUEUES) and the compose files
that run Prometheus and Grafana."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from celery import current_app
from django.conf import settings

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_sas_queues__every_registered_task_routes_to_a_listed_queue() -> None:
    current_app.loader.import_default_modules()
    router = current_app.amqp.router
    missing = {}
    for name, task in current_app.tasks.items():
        # A test's own task (tests/agents/test_breaker_unexpected.py's bugtest agent), registered
        # when its module was imported in this process, is not the engine's.
        if name.startswith("celery.") or task.__module__.startswith("tests."):
            continue
        queue = router.route({}, name, args=(), kwargs={}).get("queue")
        queue_name = getattr(queue, "name", queue)
        if queue_name not in settings.SAS_QUEUES:
            missing[name] = queue_name
    assert not missing, f"tasks routed to queues missing from settings.SAS_QUEUES: {missing}"
    assert [q.name for q in settings.CELERY_TASK_QUEUES] == settings.SAS_QUEUES


def test_compose__prometheus_and_grafana__local_ports_healthchecks_and_mounted_files() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yml").read_text())
    for name in ("prometheus", "grafana"):
        service = compose["services"][name]
        assert all(str(port).startswith("127.0.0.1:") for port in service["ports"]), service["ports"]
        assert service["healthcheck"]["test"], name
        for volume in service["volumes"]:
            source = volume.split(":", 1)[0]
            if source.startswith("./"):
                assert (DOCKER / source).exists(), f"{name} mounts missing {source}"
    # Flower's login: FLOWER_BASIC_AUTH from the env files (Flower reads FLOWER_* variables);
    # the command refuses to start without it.
    assert "FLOWER_BASIC_AUTH" in compose["services"]["flower"]["command"]
    for name in ("prometheus", "grafana"):
        assert [f["path"] for f in compose["services"][name]["env_file"]] == [
            "production.env.example",
            "production.env",
        ]
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "sasproject.json").read_text())
    assert dashboard["panels"] and all(p["targets"] for p in dashboard["panels"])


def test_queue_statuses__rabbitmq_broker__depth_from_a_passive_declare(settings) -> None:
    """The machine's RabbitMQ (127.0.0.1:5672, guest): a queue of this test's own with three
    messages, and one that does not exist (0, not an error)."""
    import os

    from kombu import Connection, Exchange, Queue

    from liveness.queues import queue_statuses

    url = os.environ.get("SAS_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
    name = f"test{os.getpid()}.depth"
    missing = f"test{os.getpid()}.missing"
    queue = Queue(name, Exchange(name, type="direct"), routing_key=name, auto_delete=False)
    with Connection(url, connect_timeout=2) as conn:
        try:
            conn.ensure_connection(max_retries=1)
        except Exception as exc:
            import pytest

            pytest.skip(f"RABBITMQ NOT REACHABLE at {url}: the amqp queue-depth path is NOT tested ({exc})")
        producer = conn.Producer()
        for i in range(3):
            producer.publish({"n": i}, exchange=queue.exchange, routing_key=name, declare=[queue])
        try:
            settings.CELERY_BROKER_URL = url
            settings.SAS_QUEUES = [name, missing]
            statuses = {s.name: s for s in queue_statuses()}
        finally:
            queue(conn.default_channel).delete()
    assert statuses[name].depth == 3 and statuses[name].error == ""
    assert statuses[missing].depth == 0
    assert statuses[name].oldest_age is None  # AMQP cannot peek

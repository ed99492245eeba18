"""The benchmark baselines of issue 6 claim "the same worker settings as ours" and "exact pins in
a bench-only venv". These pin the claims: change our Celery settings, and the baseline must follow
(or the README's comparison stops being like for like)."""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

from bench.baselines import bare_celery

REPO = Path(__file__).resolve().parent.parent.parent


def test_bare_celery_runs_with_our_worker_settings() -> None:
    conf = bare_celery.app.conf
    assert conf.task_acks_late is settings.CELERY_TASK_ACKS_LATE is True
    assert conf.task_reject_on_worker_lost is settings.CELERY_TASK_REJECT_ON_WORKER_LOST is True
    assert conf.worker_prefetch_multiplier == settings.CELERY_WORKER_PREFETCH_MULTIPLIER == 1
    assert conf.task_serializer == settings.CELERY_TASK_SERIALIZER == "json"
    assert list(conf.accept_content) == list(settings.CELERY_ACCEPT_CONTENT) == ["json"]
    # ... and without what makes ours heavier: task events, a result backend.
    assert conf.worker_send_task_events is False
    assert conf.task_send_sent_event is False
    assert conf.task_ignore_result is True


def test_bare_chain_calls_what_the_order_agents_call() -> None:
    """Same three endpoints as the order workflow's agents, in the same order."""
    source = (REPO / "bench" / "baselines" / "bare_celery.py").read_text()
    agents = (REPO / "orders" / "tasks.py").read_text()  # the order domain's agent operations
    paths = ["/inventory/reserve", "/payment/charge", "/shipping/create"]
    assert [p for p in paths if f'"{p}"' in source] == paths
    assert [p for p in paths if f'"{p}"' in agents] == paths


def test_bench_requirements_are_exact_pins() -> None:
    lines = [
        line.strip()
        for line in (REPO / "bench" / "requirements-baselines.txt").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert any(line.startswith("procrastinate==") for line in lines)
    bad = [line for line in lines if not re.fullmatch(r"[A-Za-z0-9_.\-]+==[0-9][A-Za-z0-9.]*", line)]
    assert bad == []
    assert ".bench-venv/" in (REPO / ".gitignore").read_text().splitlines()


def test_importing_the_baseline_leaves_our_celery_app_current() -> None:
    """The baseline app must not take over `current_app` (the engine publishes through it):
    importing it in a test session once sent every later kick to the baseline's broker prefix."""
    from celery import current_app

    assert current_app.main == "sasproject"
    assert current_app.main != bare_celery.app.main

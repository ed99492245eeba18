"""The Celery application. All settings live in Django settings under the CELERY_ namespace."""

from __future__ import annotations

import gc
import os
import socket
import time
from typing import Any

from celery import Celery
from celery.signals import (
    beat_init,
    before_task_publish,
    celeryd_after_setup,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_process_init,
    worker_ready,
)

from sasproject import kombu_client_reuse, kombu_compat, logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")
logs.configure_early()

kombu_compat.channel_close_patch_install()
kombu_client_reuse.redis_client_reuse_install()

app = Celery("sasproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

# Workers and beat log through settings.LOGGING (sasproject/logs.py: the text or JSON format,
# quiet periodic tasks), not Celery's own handlers: a receiver of setup_logging replaces them.
setup_logging.connect(logs.configure_celery_logging, weak=False)


@celeryd_after_setup.connect
def _name_worker_in_logs(sender: str, instance: Any = None, **kwargs: Any) -> None:
    """JSON lines' `worker`: the node name (control@host), before the pool forks. With
    LOG_FORMAT=json, no start-up banner either (Celery prints it right after this signal, as
    plain text): every line of the output is then JSON."""
    logs.set_worker_name(str(sender))
    if instance is not None and logs.json_enabled():
        instance.quiet = True


@worker_process_init.connect
@worker_ready.connect
def _freeze_startup_heap(**kwargs: Any) -> None:
    """Once a process that runs tasks has started (a prefork pool process; a threads or solo
    worker's own process), move every object it holds then - Django, the project, Celery, some
    hundreds of thousands - to the collector's permanent generation: a full collection no longer
    walks them. A jobs dispatcher's batch allocates thousands of objects and so runs full
    collections; this took 5% off its time (bench/README.md, "Issue 20, fourth session")."""
    gc.collect()
    gc.freeze()


@beat_init.connect
def _name_beat_in_logs(**kwargs: Any) -> None:
    logs.set_worker_name(f"beat@{socket.gethostname()}")
    # Beat publishes only the engine's periodic tasks (sweep, tick, dispatcher, alert rules),
    # which send no task events (send_events=False; their last runs are on the health page):
    # with CELERY_TASK_SEND_SENT_EVENT on, their task-sent events alone - a few a second - would
    # still list them in Flower, as "sent" forever, and cost a publish each (issue 19).
    app.conf.task_send_sent_event = False


def _add_queue_heartbeat() -> None:
    from liveness.heartbeat import QueueHeartbeat

    app.steps["consumer"].add(QueueHeartbeat)


_add_queue_heartbeat()


@before_task_publish.connect
def _stamp_sent_at(headers: dict[str, Any] | None = None, **kwargs: Any) -> None:
    """Every message carries when it was published (`sas_sent_at`, epoch seconds): the agent
    measures its schedule-to-start from it (liveness/counters.py) and the health page the age
    of the oldest message in a queue (liveness/queues.py). A header, not an argument: tasks and
    their signatures are unchanged, and a worker reads it as `task.request.sas_sent_at`."""
    if headers is not None:
        headers.setdefault("sas_sent_at", time.time())


@task_prerun.connect
@task_postrun.connect
def _close_old_db_connections(**kwargs: Any) -> None:
    """Treat each task like a request, but check a connection only when there is a reason:
    drop one that saw an error and no longer answers, one left outside autocommit, or one older
    than CONN_MAX_AGE; keep a healthy one as it is. Django's close_old_connections would also
    re-arm CONN_HEALTH_CHECKS, which costs a `SELECT 1` round trip at the start of every task -
    a fifth of an engine step's database time (bench/README.md). A connection that died while
    idle (PostgreSQL restarted) fails its task's first statement, which marks it; the agent's
    reply retries once on a fresh connection (agents/base.py), every other task's next run
    gets one. See CELERY_DB_REUSE_MAX in settings."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        obsolete = conn.close_at is not None and time.monotonic() >= conn.close_at
        if conn.errors_occurred or obsolete or conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close_if_unusable_or_obsolete()

"""The engine's block of the SAS dict: the scheduler, the supervisor's sweep, the jobs
dispatcher, claims, bulkheads, the circuit breaker and the remote services' addresses."""

from __future__ import annotations

import os
from typing import Any

from django.core.exceptions import ImproperlyConfigured

from sasproject.settings.base import SAS_WORKFLOW_APPS
from sasproject.settings.celery_conf import REDIS_URL
from sasproject.settings.env import env_bool, env_float, env_slots
from sasproject.workflow_apps import WORKFLOW_APP_SLOTS, workflow_app_queue

# --------------------------------------------------------------------------------------------
# The engine.
# --------------------------------------------------------------------------------------------
SAS: dict[str, Any] = {
    # How agents deliver replies: "inline" calls the scheduler's reply service in the agent's
    # process in one fenced transaction; "queue" sends a message to the scheduler queue.
    # Both are fenced by the lease. See bench/README.md for the measurement behind the default.
    "REPLY_MODE": os.environ.get("SAS_REPLY_MODE", "inline"),
    # Supervisor sweep and scheduler safety tick periods (seconds); written into the
    # django-celery-beat rows on setup, editable in the admin afterwards.
    "SUPERVISOR_INTERVAL": env_float("SAS_SUPERVISOR_INTERVAL", 1.0),
    "SCHEDULER_TICK_INTERVAL": env_float("SAS_SCHEDULER_TICK_INTERVAL", 2.0),
    "SWEEP_BATCH": int(os.environ.get("SAS_SWEEP_BATCH", "500")),
    # The jobs dispatcher (seed 004's Scheduler Service, scheduler/jobs.md): its beat period
    # (seconds; the django-celery-beat row, editable in the admin), rows per transaction, and
    # how long one tick may keep firing full batches (and at most how many): a burst is written
    # by one tick, not a few batches per beat period (bench/README.md, "Jobs").
    "JOBS_DISPATCH_INTERVAL": env_float("SAS_JOBS_DISPATCH_INTERVAL", 1.0),
    # The alert rules' evaluator's beat period (seconds; the "sas: alert rules" row). A tick
    # costs a few ms (bench/alerts.py), so it can run every few seconds.
    "ALERTS_INTERVAL": env_float("SAS_ALERTS_INTERVAL", 5.0),
    "JOBS_DISPATCH_BATCH": int(os.environ.get("SAS_JOBS_DISPATCH_BATCH", "1000")),
    "JOBS_DISPATCH_MAX_BATCHES": int(os.environ.get("SAS_JOBS_DISPATCH_MAX_BATCHES", "1000")),
    "JOBS_DISPATCH_TICK_SECONDS": env_float("SAS_JOBS_DISPATCH_TICK_SECONDS", 20.0),
    # Scale-out (issue 20): the due work is split into this many shards (a hash of the job); a
    # tick fires only the shards it holds a lease on, so K dispatcher processes on any hosts fire
    # K slices at once. More shards than dispatchers balance better (12 divides among 1, 2, 3, 4
    # and 6); each idle tick costs a few statements per shard. A lease lasts this many seconds
    # past its holder's last batch: a dispatcher killed mid-tick holds its shard no longer.
    "JOBS_DISPATCH_SHARDS": int(os.environ.get("SAS_JOBS_DISPATCH_SHARDS", "12")),
    # Shards one claim covers (leased together): a minute's rows in fewer, fuller batches (each
    # pays a claim's scan of the due index, a lease renewal and a commit), while K dispatchers up
    # to SHARDS / SHARDS_PER_CLAIM still each get groups of their own. 2 of 12 make 6 groups,
    # shared evenly by 1, 2, 3 or 6 dispatchers (groups of 4 split 2 dispatchers 2:1 - measured,
    # bench/README.md "Jobs").
    "JOBS_DISPATCH_SHARDS_PER_CLAIM": int(os.environ.get("SAS_JOBS_DISPATCH_SHARDS_PER_CLAIM", "2")),
    "JOBS_DISPATCH_LEASE_SECONDS": env_float("SAS_JOBS_DISPATCH_LEASE_SECONDS", 10.0),
    # Issue 29, item 5: once the dispatchers have written this many runs since the last
    # refresh, the next tick that writes runs and drains what was due (the burst is over)
    # ANALYZEs the tables a firing changes (due rows, runs, steps): a burst leaves the planner
    # the statistics from before it until autovacuum's next ANALYZE (up to a minute on a
    # default server, never with autovacuum off), and the statements that count or range over
    # due rows (the idle tick's shard lease, /metrics' due jobs) or join the runs then scan
    # whole tables. At most once per
    # JOBS_ANALYZE_INTERVAL seconds across every dispatcher (Redis). 0: off. Cost and effect:
    # bench/README.md, "Statistics after a burst".
    "JOBS_ANALYZE_AFTER_ROWS": int(os.environ.get("SAS_JOBS_ANALYZE_AFTER_ROWS", "10000")),
    "JOBS_ANALYZE_INTERVAL": env_float("SAS_JOBS_ANALYZE_INTERVAL", 60.0),
    # The queue of the dispatcher's ticks (beat's row, the wake-ups and relays a tick sends).
    "JOBS_DISPATCH_QUEUE": os.environ.get("SAS_JOBS_DISPATCH_QUEUE", "jobs"),
    # More modules that register workflows at import (comma-separated dotted names), beside
    # the apps' own; see scheduler/apps.py.
    "WORKFLOW_MODULES": [m for m in os.environ.get("SAS_WORKFLOW_MODULES", "").split(",") if m.strip()],
    # Test only: seconds the dispatcher sleeps between its claim and its commit, so a crash
    # test can kill it there. 0 in every real deployment.
    # Issue 30: while a job with dependents has a run going or not settled, the dispatcher
    # ticks again this many seconds after each tick (one follow-up across all dispatchers, a
    # Redis SET NX), so a dependent run is written within about this long of its parent's end
    # rather than at beat's next send (JOBS_DISPATCH_INTERVAL). 0: off.
    "JOBS_DEPENDENTS_POLL": env_float("SAS_JOBS_DEPENDENTS_POLL", 0.2),
    "JOBS_TEST_PAUSE_AFTER_CLAIM": env_float("SAS_JOBS_TEST_PAUSE_AFTER_CLAIM", 0.0),
    # Test only: seconds a settle that queued dependent runs (issue 30) sleeps before its commit,
    # so a crash test can kill the dispatcher with the gates written and not committed.
    "JOBS_TEST_PAUSE_AFTER_DEPENDENTS": env_float("SAS_JOBS_TEST_PAUSE_AFTER_DEPENDENTS", 0.0),
    "CLAIM_BATCH": int(os.environ.get("SAS_CLAIM_BATCH", "100")),
    # Backpressure: at most this many steps of one agent operation Processing at once, for an
    # operation whose queue has no BULKHEAD_SLOTS entry.
    "MAX_IN_FLIGHT_PER_OPERATION": int(os.environ.get("SAS_MAX_IN_FLIGHT", "50")),
    # Bulkheads' slots (issue 26, docs/operating/fairness.md): at most this many steps of an agent queue
    # Processing at once - its workers' threads, so nothing waits in the broker's FIFO queue and
    # the fair claim, not the broker, decides who runs next. The Procfile's and compose's `-c`
    # of the queue's worker (tests/scheduler/test_bulkheads.py pins them); a queue not listed gets
    # MAX_IN_FLIGHT_PER_OPERATION. catalogue and exports share longjobs' 2.
    # Environment: SAS_BULKHEAD_SLOTS="agent.http=16,agent.tasks=4" (over these defaults).
    "BULKHEAD_SLOTS": env_slots(
        "SAS_BULKHEAD_SLOTS",
        {
            "agent.inventory": 8,
            "agent.payment": 8,
            "agent.shipping": 8,
            "agent.webhook": 8,
            "agent.http": 8,
            "agent.tasks": 2,
            "agent.catalogue": 2,
            "agent.exports": 2,
            # The workflow apps' queues (issue 31): the agents-apps worker's threads.
            **{workflow_app_queue(app): WORKFLOW_APP_SLOTS for app in SAS_WORKFLOW_APPS},
        },
    ),
    # The most of a bulkhead's slots one owner may hold: ceil(slots x share), at least 1. Below
    # 1 it keeps slots free for whoever comes next, so a newcomer starts at once rather than when
    # one of a flooding owner's calls ends (a 20 s call, for http); the price is a lone owner's
    # burst running on that share (docs/decisions.md, "A bulkhead's share per owner"). 1: none.
    "BULKHEAD_OWNER_SHARE": env_float("SAS_BULKHEAD_OWNER_SHARE", 0.75),
    # A step that a reply claims runs in place, with no broker hop, when the replying worker
    # serves its queue: at most this many per task (0: off). agents/eager.py.
    "EAGER_STEPS": int(os.environ.get("SAS_EAGER_STEPS", "8")),
    # Schedule-to-start (issue 18, docs/operating/fairness.md): seconds a job occurrence's run may wait
    # for its first step to be claimed; past it the supervisor skips the occurrence (run
    # Cancelled, a "skipped: not started within N s (backlog)" job history row). A workflow may
    # set its own (`Workflow.schedule_to_start`); orders never expire. 0: never.
    "SCHEDULE_TO_START": env_float("SAS_SCHEDULE_TO_START", 300.0),
    # Claim a new run's first step in the submit transaction when there is room (no kick hop).
    "CLAIM_ON_SUBMIT": env_bool("SAS_CLAIM_ON_SUBMIT", True),
    # Circuit breaker (per remote service, shared by all workers through Redis).
    "BREAKER_FAILURE_THRESHOLD": int(os.environ.get("SAS_BREAKER_FAILURE_THRESHOLD", "5")),
    "BREAKER_RESET_TIMEOUT": env_float("SAS_BREAKER_RESET_TIMEOUT", 5.0),
    "BREAKER_REDIS_URL": os.environ.get("SAS_BREAKER_REDIS_URL", REDIS_URL),
    # At most this much of a remote service's answer is read (the call's total deadline bounds
    # the time): a larger answer is a transient fault (agents/outbound.py).
    "REMOTE_RESPONSE_MAX_BYTES": int(os.environ.get("SAS_REMOTE_RESPONSE_MAX_BYTES", str(1024 * 1024))),
    # The largest JSON an engine message may carry as an agent request's payload or a reply's
    # result; a larger one is dropped unread (scheduler/messages.py). Above the remote answer's
    # limit, whose parsed body a success reply carries.
    "MESSAGE_MAX_BYTES": int(os.environ.get("SAS_MESSAGE_MAX_BYTES", str(2 * 1024 * 1024))),
    # Where the remote services live. The simulator serves all three under one base URL.
    "REMOTE_URLS": {
        "inventory": os.environ.get(
            "SAS_INVENTORY_URL", os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
        ),
        "payment": os.environ.get(
            "SAS_PAYMENT_URL", os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
        ),
        "shipping": os.environ.get(
            "SAS_SHIPPING_URL", os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055")
        ),
    },
}
if not 0 < SAS["BULKHEAD_OWNER_SHARE"] <= 1:
    raise ImproperlyConfigured(
        f"SAS_BULKHEAD_OWNER_SHARE is a fraction above 0 and at most 1, not {SAS['BULKHEAD_OWNER_SHARE']!r}"
    )

# How much of a step's output (a task's return value, an HTTP answer's body) the run page, the
# runs API and the progress API show; the rest is a download for its owner (issue 28,
# scheduler/outputs.py). Bytes of UTF-8 text.
SAS["OUTPUT_EXCERPT_BYTES"] = int(os.environ.get("SAS_OUTPUT_EXCERPT_BYTES", "2048"))

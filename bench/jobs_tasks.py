"""Bench-only tasks and workflow for bench/jobs.py; never imported by the project's own code.

- `bench_jobs_noop`: a one-step workflow whose step is a no-op agent operation
  (`agents.benchnoop.noop`, queue `agent.benchnoop`): the agent's whole path - deadline check,
  start mark, circuit breaker, fenced reply - with no remote call. What the jobs bench fires.
- `bench.jobs_probe`: the task the django-celery-beat baseline fires; it records its name and
  the time it started in a Redis list, for the bench to compare with the cron time.

bench/jobs.py's processes import it by SAS_WORKFLOW_MODULES=bench.jobs_tasks (the scheduler app
imports those modules when Django starts), so it exists in the bench's processes only.
"""

from __future__ import annotations

import os
import time
from typing import Any

from celery import shared_task

from agents.base import AgentTask
from sasproject.redis_client import get_redis
from scheduler.workflows import StepDef, Workflow, WorkflowInputError, get_workflow, register

NOOP_WORKFLOW = "bench_jobs_noop"
NOOP_OPERATION = "agents.benchnoop.noop"
NOOP_QUEUE = "agent.benchnoop"
PROBE_TASK = "bench.jobs_probe"
PROBE_QUEUE = "bench"


def probe_key() -> str:
    """The Redis list the probes push to (the bench's own key prefix)."""
    return f"{os.environ.get('SAS_REDIS_PREFIX', '')}jobsbench:probes"


class NoopAgent(AgentTask):
    """An agent whose remote call does nothing: the step costs only the engine's own path."""

    service = "benchnoop"

    def call_remote(self, *, path: str, payload: dict[str, Any], idempotency_key: str, timeout: float) -> Any:
        return {"ok": True}


@shared_task(name=NOOP_OPERATION, bind=True, base=NoopAgent)
def noop(self: NoopAgent, **kwargs: Any) -> str:
    return self.perform(path="/", **kwargs)


@shared_task(name=PROBE_TASK, ignore_result=True)
def jobs_probe(name: str = "") -> None:
    """Record `name` and the time this task started (what beat's lag is measured to)."""
    get_redis().rpush(probe_key(), f"{name} {time.time():.6f}")


def register_noop_workflow() -> Workflow:
    try:
        return get_workflow(NOOP_WORKFLOW)
    except WorkflowInputError:
        return register(
            Workflow(
                name=NOOP_WORKFLOW,
                # The bench's jobs stand for customers' jobs (owners who are not staff).
                customer_schedulable=True,
                steps=[
                    StepDef(
                        name="noop",
                        operation=NOOP_OPERATION,
                        timeout=30.0,
                        queue_timeout=60.0,
                        max_failures=3,
                        backoff_base=0.5,
                        backoff_max=5.0,
                    )
                ],
            )
        )


register_noop_workflow()


PROFILE_ENV = "SAS_BENCH_PROFILE_DIR"


def profile_dispatcher(out_dir: str) -> None:
    """cProfile every dispatcher tick of this process (bench/jobs.py --profile, when py-spy is not
    installed): `tick.jobs_dispatch` wrapped, the stats of all ticks so far written to
    `<out_dir>/dispatcher-<pid>.prof` after each tick that fired something."""
    import cProfile

    from scheduler.dispatcher import tick

    inner = tick.jobs_dispatch
    profiler = cProfile.Profile()

    def profiled(**kwargs: Any) -> Any:
        profiler.enable()
        try:
            done = inner(**kwargs)
        finally:
            profiler.disable()
        if done.claimed or done.settled:
            profiler.dump_stats(f"{out_dir}/dispatcher-{os.getpid()}.prof")
        return done

    tick.jobs_dispatch = profiled


if os.environ.get(PROFILE_ENV):
    from celery.signals import worker_process_init

    # In the pool's process, once it has started (wrapping the tick at import time, inside the
    # apps' ready(), kept the worker from ever becoming ready).
    @worker_process_init.connect(weak=False)
    def _profile_this_process(**_: Any) -> None:
        profile_dispatcher(os.environ[PROFILE_ENV])

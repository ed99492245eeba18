"""How fast a step whose agent was killed (SIGKILL, mid remote call) runs again.

    python bench/kill_rerun.py [--trials 3] [--step-timeout 3]

Real processes: simulator, control worker, agent worker, celery beat (supervisor sweep every
second). Each trial: payment answers after 1.5 s; submit an order; once the agent is inside the
charge, SIGKILL the agent worker (parent and pool children) and start a new one. Reports when the
charge ran again, against the target "within its deadline plus one sweep interval plus a second",
and checks there is exactly one payment in the simulator's ledger.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, log_dir, print_table, truncate_engine


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--step-timeout", type=float, default=3.0)
    args = parser.parse_args()
    os.environ["SAS_ORDER_STEP_TIMEOUT"] = str(args.step_timeout)
    os.environ["SAS_ORDER_BACKOFF_BASE"] = "0.2"
    os.environ["SAS_ORDER_BACKOFF_MAX"] = "1"
    env = bench_environment()

    from django.conf import settings
    from django.contrib.auth import get_user_model

    from orders.services import order_submit
    from sastools.harness import (
        AGENT_QUEUES,
        CONTROL_QUEUES,
        celery_beat,
        celery_worker,
        simulator_process,
        wait_for,
    )
    from scheduler.models import Run, Step, TaskExecutionHistory
    from simulator.client import SimulatorControl

    logs = log_dir()
    sim_proc = simulator_process(url=env["SIMULATOR_URL"], log_dir=logs, env=env).start(
        ready_marker="SIMULATOR_LISTENING"
    )
    sim = SimulatorControl(env["SIMULATOR_URL"])
    control = celery_worker(name="control", queues=CONTROL_QUEUES, log_dir=logs, env=env).start(
        ready_marker=" ready."
    )
    agents = celery_worker(name="agents", queues=AGENT_QUEUES, log_dir=logs, env=env).start(
        ready_marker=" ready."
    )
    beat = celery_beat(log_dir=logs, env=env).start(ready_marker="beat: Starting")
    sweep_interval = settings.SAS["SUPERVISOR_INTERVAL"]
    user, _ = get_user_model().objects.get_or_create(username="bench")
    rows = []
    try:
        for trial in range(1, args.trials + 1):
            truncate_engine()
            sim.reset()
            sim.set_faults("payment", latency_ms=1500)
            order = order_submit(
                owner_id=user.id,
                data={"items": [{"sku": "K", "quantity": 1}], "amount": "5.00", "currency": "EUR"},
            )
            charging = Step.objects.filter(
                run_id=order.run_id, name="charge_payment", process_state="processing"
            )
            first = wait_for(charging.first, timeout=20)
            # The charge request is now held 1.5 s by the payment service: kill inside it.
            time.sleep(0.5)
            killed_at = time.time()
            agents.kill(signal.SIGKILL)
            sim.set_faults("payment", latency_ms=0)
            agents.start(ready_marker=" ready.")
            finished = Run.objects.filter(pk=order.run_id, state__in=Run.TERMINAL_STATES)
            run = wait_for(
                finished.first,
                timeout=60,
            )
            attempts = list(
                TaskExecutionHistory.objects.filter(
                    step__run_id=order.run_id, step__name="charge_payment", kind="attempt"
                ).order_by("id")
            )
            second_start = attempts[1].started_at
            late_by = (second_start - first.complete_by).total_seconds()
            charges = len(sim.ledger(service="payment", operation="charge"))
            rows.append((trial, run.state, late_by, (second_start.timestamp() - killed_at), charges))
    finally:
        beat.stop()
        agents.stop()
        control.stop()
        sim_proc.stop()
        truncate_engine()

    budget = sweep_interval + 1.0
    print(f"\nkilled agent, step timeout {args.step_timeout:.1f} s, sweep interval {sweep_interval:.1f} s")
    print_table(
        [
            (
                f"trial {t}",
                f"run {state}; re-run {late:.2f} s after complete_by ({since:.2f} s after the kill); "
                f"target <= {budget:.1f} s: {'met' if late <= budget else 'MISSED'}; payments in ledger: {n}",
            )
            for t, state, late, since, n in rows
        ]
    )


if __name__ == "__main__":
    main()

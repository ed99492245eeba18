"""The step statement alone: what one success reply costs, as the agent sees it and on the server.

    SAS_BENCH_DB=<name> python bench/reply_statement.py [--runs 300] [--backlog 0] [--rounds 1]
                                                        [--owners 1] [--set synchronous_commit=off ...]

In this process, no worker: submits `--runs` runs of a three-step test workflow, claims their
first steps, then replies success to every step in turn (`transitions.step_succeed` with
claim_next, as an agent's reply: the next step is claimed in the same statement), three replies
a run. `--backlog` more runs are submitted and left Pending, so each reply's "one more" claim
(the slot it freed) finds one, as under a burst; `--owners K` spreads that backlog over K owners
(the replying runs' owner one of them), so each "one more" takes the fair claim's several-owner
path (docs/operating/fairness.md) instead of the one-owner path. Prints per reply: the wall time p50 and mean
(the round trip and the commit, as the agent waits for it), this process's CPU, and the CPU of
the PostgreSQL backend serving it (`/proc/<pid>/stat`). `--set name=value` sets a PostgreSQL
setting for the session first (to weigh one). Server CPU per reply is the figure to compare
schema or function changes with: it does not depend on the Python side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import bench_environment, print_table, truncate_engine


def _backend_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--backlog", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--owners", type=int, default=1, help="owners the backlog is spread over")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    for setting in args.set:
        if "=" not in setting:
            parser.error(f"--set takes name=value, not {setting!r}")

    bench_environment()
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from scheduler import transitions
    from scheduler.services import run_submit, step_claim_due
    from tests.engine_workflow import ENGINE_INPUT, ENGINE_WORKFLOW, register_engine_workflow

    register_engine_workflow()
    user, _ = get_user_model().objects.get_or_create(username="bench-reply")
    owners = [user.id] + [
        get_user_model().objects.get_or_create(username=f"bench-reply-{i}")[0].id
        for i in range(1, args.owners)
    ]
    with connection.cursor() as cursor:
        for setting in args.set:
            name, value = setting.split("=", 1)
            cursor.execute("SELECT set_config(%s, %s, false)", [name, value])
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]

    for round_no in range(1, args.rounds + 1):
        truncate_engine()
        runs = [
            run_submit(workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=user.id, kick=False)
            for _ in range(args.runs)
        ]
        claims = []
        for run in runs:
            with transaction.atomic():
                claims += step_claim_due(instance="bench", limit=1, run_id=run.id)
        for i in range(args.backlog):
            run_submit(
                workflow=ENGINE_WORKFLOW, input=ENGINE_INPUT, owner_id=owners[i % len(owners)], kick=False
            )

        walls: list[float] = []
        cpu0, backend0, started = time.process_time(), _backend_cpu(pid), time.perf_counter()
        while claims:
            following = []
            for claim in claims:
                t0 = time.perf_counter()
                done = transitions.step_succeed(
                    step_id=claim.step_id,
                    lease=claim.lease,
                    result={"ok": True},
                    instance="bench",
                    claim_next=True,
                    observed_ok=False,
                )
                walls.append(time.perf_counter() - t0)
                if not done.accepted:
                    raise SystemExit(f"reply of step {claim.step_id} refused")
                following += [c for c in done.claims if str(c.run_id) == str(claim.run_id)]
            claims = following
        elapsed = time.perf_counter() - started
        n = len(walls)
        print(
            f"round {round_no}: {n} replies ({args.runs} runs, "
            f"backlog {args.backlog} of {args.owners} owner(s), "
            f"settings {args.set or 'default'})"
        )
        print_table(
            [
                ("wall p50 / mean", f"{statistics.median(walls) * 1e3:.3f} / {elapsed / n * 1e3:.3f} ms"),
                ("this process's CPU", f"{(time.process_time() - cpu0) / n * 1e3:.3f} ms"),
                ("PostgreSQL backend's CPU", f"{(_backend_cpu(pid) - backend0) / n * 1e3:.3f} ms"),
            ]
        )


if __name__ == "__main__":
    main()

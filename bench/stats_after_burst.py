"""Every engine and dispatcher statement after a 100,000-job burst, on the statistics from before
it and again after an ANALYZE (issue 29, item 5).

    SAS_BENCH_DB=benchstats python bench/stats_after_burst.py [--jobs 100000] [--explain NAME ...]
        [--passes stale analysed]

One pass: a clean store, `--jobs` daily jobs of bench/jobs.py's 100 owners due now, an ANALYZE
(the statistics from before the burst: jobs and occurrences, no runs, no steps), then the
burst fired by the dispatcher's own code in this process (no worker): the first half untimed,
the second half timed. Then, with nothing else running, the life of the burst's steps through
the engine's own code, each call timed statement by statement:
- `step_claim_many` (the scheduler's claim of 500, 12 calls, committed: Processing piles up);
- the agent's read (`step_request_held`), the start mark (`step_mark_started`);
- replies (`step_reply`): 1,500 successes, 150 transient, 100 permanent, one call each, committed;
- the supervisor's sweep (`step_expire_batch`) of steps whose deadline the bench moved to the
  past (as if their agents died); the supervisor's tick (`holds_settle`), the skip of unstarted
  runs past their window (`runs_skip_unstarted`);
- the key admit (`runs_key_hold`) of Pending runs, 100 a call;
- the dispatcher's idle ticks (the settle of the runs the replies ended: `job_runs_mark_settled`,
  `job_history_close`, ...);
- the metrics scrape (`EngineCollector.collect`: the fold of finished runs, the gauges) and the
  alert rules' evaluation (`alert_rules_evaluate`).
Pass `analysed` is the same, with an ANALYZE after the burst's first half and after the burst.
Every statement is timed as the client sees it (psycopg's `execute`), named by queries.sql,
jobs.sql, alerts.sql or ops/metrics.py where it is one of theirs. The table: statement, calls,
p50 stale, p50 analysed, their ratio, and `grows` - the median of the last third of a pass's
calls over the first third's, in each pass (a statement whose cost rises with the work done
since the statistics were taken rises call over call). `--explain NAME` prints the auto_explain
plan of each nested statement slower than 5 ms of the named phase on stale statistics.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ["SAS_WORKFLOW_MODULES"] = "bench.jobs_tasks"
# No in-flight cap: the claimed steps pile up Processing, as they would behind slow agents.
os.environ["SAS_BULKHEAD_SLOTS"] = "agent.benchnoop=1000000"
os.environ["SAS_BULKHEAD_OWNER_SHARE"] = "1"

from bench.common import bench_environment

ENV = bench_environment()

import psycopg  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from bench import jobs as bj  # noqa: E402
from scheduler import transitions as engine_transitions  # noqa: E402
from scheduler.dispatcher import transitions as job_transitions  # noqa: E402
from scheduler.services import jobs_dispatch  # noqa: E402
from scheduler.sqlfiles import _binary, named_statements  # noqa: E402

PHASE: str | None = None
TAG = ""  # the pass running: the plans are tagged with it
# (phase, statement) -> the times of its calls, in seconds, in call order.
CALLS: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
PLANS: list[str] = []


_SAVEPOINT = re.compile(r'^((?:RELEASE |ROLLBACK TO )?SAVEPOINT) "?\w+"?$')


def _key(text: str) -> str:
    return _SAVEPOINT.sub(r"\1", " ".join(text.split())[:200])


def _statement_names() -> dict[str, str]:
    import alerting
    from ops import metrics

    names: dict[str, str] = {}
    sources = [job_transitions.job_queries(), engine_transitions.engine_queries()]
    sources.append(named_statements(Path(alerting.__file__).parent / "sql" / "alerts.sql"))
    sources.append(
        {k.lower(): v for k, v in vars(metrics).items() if k.startswith("SQL_") and isinstance(v, str)}
    )
    for statements in sources:
        for name, text in statements.items():
            names[_key(text)] = name
            names[_key(_binary(text).decode())] = name
    return names


def _time_statements() -> None:
    names = _statement_names()
    execute = psycopg.Cursor.execute

    def timed_execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else bytes(query).decode()
        key = names.get(_key(text)) or _key(text)[:70]
        # The dispatcher's own ANALYZE is timed wherever it runs (its cost).
        where = "dispatcher's ANALYZE" if key == "hot_tables_analyze" else PHASE
        if where is None:
            return execute(self, query, params, **kwargs)
        started = time.perf_counter()
        try:
            return execute(self, query, params, **kwargs)
        finally:
            CALLS[(where, key)].append(time.perf_counter() - started)

    psycopg.Cursor.execute = timed_execute  # type: ignore[method-assign]


@contextmanager
def phase(name: str) -> Iterator[None]:
    global PHASE
    PHASE = name
    try:
        yield
    finally:
        PHASE = None


@contextmanager
def explained(enabled: bool, tag: str) -> Iterator[None]:
    """auto_explain of every nested statement over 5 ms, while `enabled`."""
    if not enabled:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 5;"
            " SET auto_explain.log_nested_statements = on; SET auto_explain.log_analyze = on;"
            " SET auto_explain.log_buffers = on; SET auto_explain.log_level = notice;"
            " SET client_min_messages = notice"
        )
    handler = lambda diag: PLANS.append(f"[{tag}, {PHASE}] " + (diag.message_primary or ""))  # noqa: E731
    connection.connection.add_notice_handler(handler)
    try:
        yield
    finally:
        connection.connection.remove_notice_handler(handler)
        with connection.cursor() as cursor:
            cursor.execute("SET auto_explain.log_min_duration = -1; SET client_min_messages = warning")


def _fire(until: int) -> int:
    fired = 0
    while fired < until:
        done = jobs_dispatch(instance="bench-stats", batch=1000, max_batches=5)
        fired += done.claimed
        if done.claimed == 0:
            break
    return fired


def _processing(limit: int, *, offset: int = 0) -> list[tuple[int, str]]:
    return [
        (int(r[0]), str(r[1]))
        for r in bj.sql(
            "SELECT id, lease FROM scheduler_step WHERE process_state = 'processing' ORDER BY id"
            " LIMIT %s OFFSET %s",
            [limit, offset],
        )
    ]


def one_pass(*, jobs: int, analysed: bool, explain: set[str]) -> dict[str, float]:
    """One burst and the engine's work after it; returns the phases' wall seconds."""
    from alerting.services import alert_rules_evaluate
    from ops.metrics import EngineCollector
    from scheduler.selectors import step_request_held
    from scheduler.services.expiry import runs_skip_unstarted
    from scheduler.services.reply import step_reply
    from supervisor.services import step_expire_batch

    prefix = ENV["SAS_REDIS_PREFIX"]
    walls: dict[str, float] = {}
    bj.due_now(bj.bench_owners(bj.OWNERS), jobs, prefix)
    bj.sql("ANALYZE")
    fired = _fire(jobs // 2)
    if analysed:
        bj.sql("ANALYZE")

    def step(name: str, call: Callable[[], object], times: int = 1) -> None:
        started = time.perf_counter()
        with phase(name), explained(name in explain, TAG):
            for _ in range(times):
                with transaction.atomic():
                    call()
        walls[name] = time.perf_counter() - started

    with phase("burst, second half"), explained("burst, second half" in explain, TAG):
        started = time.perf_counter()
        fired += _fire(jobs)
        walls["burst, second half"] = time.perf_counter() - started
    if analysed:
        bj.sql("ANALYZE")
    print(f"  {fired:,} runs fired ({'analysed' if analysed else 'stale statistics'})", flush=True)

    step("claim", lambda: engine_transitions.step_claim_many(instance="bench-stats", limit=500), 12)
    held = _processing(6000)
    operation = bj.sql("SELECT operation FROM scheduler_step WHERE id = %s", [held[0][0]])[0][0]
    reads = iter(held[:500])
    step(
        "agent read",
        lambda: step_request_held(step_id=(s := next(reads))[0], lease=s[1], operation=operation),
        500,
    )
    marks = iter(range(0, 1000, 100))
    step(
        "start mark",
        lambda: engine_transitions.step_mark_started(steps=held[(i := next(marks)) : i + 100]),
        10,
    )
    ok = iter(held[1000:2500])
    step(
        "reply success",
        lambda: step_reply(
            step_id=(s := next(ok))[0], lease=s[1], outcome="success", result={}, claim_next=False
        ),
        1500,
    )
    transient = iter(held[2500:2650])
    step(
        "reply transient",
        lambda: step_reply(step_id=(s := next(transient))[0], lease=s[1], outcome="transient", error="bench"),
        150,
    )
    permanent = iter(held[2800:2900])
    step(
        "reply permanent",
        lambda: step_reply(step_id=(s := next(permanent))[0], lease=s[1], outcome="permanent", error="bench"),
        100,
    )
    # As if the agents of 2,000 claimed steps died: their deadlines passed.
    bj.sql(
        "UPDATE scheduler_step SET complete_by = statement_timestamp() - interval '1 second', start_by = NULL"
        " WHERE id = ANY(%s)",
        [[s[0] for s in held[3000:5000]]],
    )
    step("sweep", lambda: step_expire_batch(batch=100, instance="bench-stats"), 20)
    step("supervisor tick", lambda: engine_transitions.holds_settle(batch=100), 10)
    step("skip unstarted", lambda: runs_skip_unstarted(batch=500), 5)
    pending = [
        r[0]
        for r in bj.sql(
            "SELECT run_id FROM scheduler_step WHERE process_state = 'pending' AND seq = 0"
            " ORDER BY id LIMIT 1000"
        )
    ]
    chunks = iter(range(0, 1000, 100))

    def key_hold() -> None:
        i = next(chunks)
        ids = pending[i : i + 100]
        engine_transitions.runs_key_hold(
            run_ids=ids, keys=[f"bench-{i // 100}"] * len(ids), limits=[5] * len(ids)
        )

    step("key admit", key_hold, 10)
    step("dispatcher idle tick", lambda: jobs_dispatch(instance="bench-stats", batch=1000), 10)
    step("metrics scrape", lambda: list(EngineCollector().collect()), 5)
    step("alert evaluation", alert_rules_evaluate, 5)
    return walls


def _growth(times: list[float]) -> float:
    third = len(times) // 3
    if third < 2:
        return 1.0
    return statistics.median(times[-third:]) / statistics.median(times[:third])


PASSES = ("stale", "analysed", "dispatcher")


def main() -> None:
    from django.conf import settings

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--passes", nargs="+", default=list(PASSES), choices=PASSES)
    parser.add_argument(
        "--explain", nargs="*", default=[], help="phases whose slow statements' plans to print"
    )
    parser.add_argument("--plans", type=int, default=6, help="plans printed per pass")
    parser.add_argument(
        "--min-ms", type=float, default=0.3, help="rows under this p50 in every pass are left out"
    )
    args = parser.parse_args()
    logging.getLogger("sas").setLevel(logging.ERROR)  # a permanent reply's warning a step
    _time_statements()
    prefix = ENV["SAS_REDIS_PREFIX"]
    walls: dict[str, dict[str, float]] = {}
    analyze_after = settings.SAS["JOBS_ANALYZE_AFTER_ROWS"]
    try:
        for name in args.passes:
            # Only the `dispatcher` pass has the dispatcher's own ANALYZE after a burst.
            settings.SAS["JOBS_ANALYZE_AFTER_ROWS"] = analyze_after if name == "dispatcher" else 0
            print(f"== pass {name}: {args.jobs:,} jobs ({bj.load()})", flush=True)
            before = dict(CALLS)
            CALLS.clear()
            global TAG
            TAG = name
            walls[name] = one_pass(jobs=args.jobs, analysed=name == "analysed", explain=set(args.explain))
            renamed = {(f"{name}|{ph}", k): v for (ph, k), v in CALLS.items()}
            CALLS.clear()
            CALLS.update(before)
            CALLS.update(renamed)
    finally:
        bj.reset(prefix)
    passes = list(walls)
    phases = [*walls[passes[0]], "dispatcher's ANALYZE"]
    head = "".join(f" {'p50 ' + p[:5]:>10}" for p in passes)
    head += "".join(f" {'stale/' + p[:5]:>12}" for p in passes[1:])
    head += "".join(f" {'grows ' + p[:5]:>11}" for p in passes)
    print(f"\n{'phase':<22} {'statement':<42} {'calls':>5}{head}")
    for ph in phases:
        names = {k for (p, k) in CALLS if p.endswith("|" + ph)}
        for name in sorted(names):
            times = [CALLS.get((f"{p}|{ph}", name), []) for p in passes]
            p50 = [statistics.median(t) * 1000 if t else float("nan") for t in times]
            if not any(v >= args.min_ms for v in p50):
                continue
            row = "".join(f" {v:>10.2f}" for v in p50)
            row += "".join(f" {p50[0] / v:>12.2f}" for v in p50[1:])
            grows = [_growth(t) for t in times]
            row += "".join(f" {g:>11.2f}" for g in grows)
            flag = " <- grows" if grows[0] > 1.5 else ""
            calls = max(len(t) for t in times)
            print(f"{ph:<22} {name[:42]:<42} {calls:>5}{row}{flag}")
    print("\nphase wall seconds (" + " / ".join(passes) + "):")
    for ph in phases[:-1]:
        print(f"  {ph:<22} " + " / ".join(f"{walls[p][ph]:.2f}" for p in passes))
    if PLANS:

        def took(plan: str) -> float:
            found = re.findall(r"actual time=[\d.]+\.\.([\d.]+)", plan)
            return max(map(float, found)) if found else 0.0

        print(f"\n== {len(PLANS)} plans over 5 ms, the slowest {args.plans} of each pass")
        for tag in passes:
            mine = [p for p in PLANS if p.startswith(f"[{tag},")]
            for plan in sorted(mine, key=took, reverse=True)[: args.plans]:
                print("\n" + "\n".join(line[:220] for line in plan.splitlines()))


if __name__ == "__main__":
    main()

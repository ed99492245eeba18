"""Step outputs on the customer's pages and API, for a job with 10,000 runs (issue 28 item 2).

    SAS_BENCH_DB=benchoutputs python bench/outputs.py [--runs 10000] [--body-bytes 4096] [--samples 300]
                                                     [--rounds 2] [--baseline /tmp/sas-main]

Builds its own database (SAS_BENCH_DB, migrated to this branch's schema): one customer, one
`http.call` job, and --runs runs of it, each with its one step Processed and its result as the
`http.call` agent stores it (status, content type, the kept headers, a body of --body-bytes of
incompressible text - 4096 is SAS_HTTP_JOB_RESPONSE_MAX_BYTES, the most the agent keeps - and
body_truncated) and its history rows. The first run is made by the services (job_run_now and a
real reply); the others are copies of it in SQL with their own ids, keys and times; then VACUUM
ANALYZE, as autovacuum leaves a table after a bulk insert.

Then, warm cache, in a process of its own through Django's test client (the whole view, template
and serializer; no HTTP server), it times --samples requests of each of: the run page of a random
run, the job page (its first runs page, and its last), the runs API (first page and last page,
with a real API token) and the progress API, and prints p50 / p99 of the wall clock, the p50 of
the process's CPU (what a shared machine's load moves least) and the queries a request makes.
With --baseline (a checkout of other code, e.g. main's: `git archive main | tar -x -C
/tmp/sas-main`), that code fills a database of its own the same way (SAS_BENCH_DB + "_baseline",
migrated by its own migrations: its indexes, not this branch's) and serves the same requests, the
two measured in turn for --rounds rounds, the order alternating (issue 28's before / after in one
run). Every fill, measurement and clean-up runs in a process of its own with its code's modules
(--code). Then the storage an output adds:
pg_column_size of the stored result (and of its headers), and pg_total_relation_size of the
results alone and of the step table, per run. Last, the same requests again (one round) with
every result set NULL (nothing to show): the difference is what showing outputs costs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The code measured: this checkout, or (a variant's process, --code) another one - say main's,
# `git archive main | tar -x -C /tmp/sas-main` - whose jobs/, scheduler/, templates serve the
# requests against the same database.
CODE = Path(sys.argv[sys.argv.index("--code") + 1]) if "--code" in sys.argv else Path(__file__).parent.parent
sys.path.insert(0, str(CODE.resolve()))

from bench.common import BENCH_DB, bench_environment, fmt_ms, percentile, print_table  # noqa: E402

REPO_DIR = Path(__file__).resolve().parent.parent


def _columns(table: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
            "ORDER BY ordinal_position",
            [table],
        )
        return [row[0] for row in cursor.fetchall()]


def _clone(*, template_run: Any, copies: int, body_bytes: int) -> None:
    """`copies` copies of the template run, its step (each with its own random body) and its
    history, in SQL: ids, idempotency keys and times of their own, one a minute back in time."""
    from django.db import connection

    replace_run = {
        "id": "m.run_id",
        "created_at": "m.at",
        "updated_at": "m.at",
        "scheduled_for": "m.at",
        "finished_at": "m.at + interval '1 second'",
        "correlation_id": "r.correlation_id",
    }
    replace_step = {
        "id": "nextval(pg_get_serial_sequence('scheduler_step', 'id'))",
        "run_id": "m.run_id",
        "idempotency_key": "m.run_id::text || ':call'",
        "created_at": "m.at",
        "updated_at": "m.at",
        "finished_at": "m.at + interval '1 second'",
        # Each run its own body: incompressible hex (the worst case for TOAST's compression).
        "result": (
            "jsonb_set(s.result, '{body}', to_jsonb(substr((SELECT "
            "string_agg(md5(m.n::text || ':' || g::text), '')"
            f" FROM generate_series(1, {body_bytes // 32 + 1}) AS g), 1, {body_bytes})))"
        ),
    }
    replace_history = {
        "id": "nextval(pg_get_serial_sequence('scheduler_taskexecutionhistory', 'id'))",
        "run_id": "m.run_id",
        "step_id": "CASE WHEN h.step_id IS NULL THEN NULL ELSE s2.id END",
        "started_at": "m.at",
        "ended_at": "m.at + interval '1 second'",
        "scheduled_for": "m.at",
        "event_id": "gen_random_uuid()",
    }

    def select(table: str, alias: str, replace: dict[str, str]) -> tuple[str, str]:
        cols = _columns(table)
        return ", ".join(cols), ", ".join(replace.get(c, f"{alias}.{c}") for c in cols)

    run_cols, run_vals = select("scheduler_run", "r", replace_run)
    step_cols, step_vals = select("scheduler_step", "s", replace_step)
    hist_cols, hist_vals = select("scheduler_taskexecutionhistory", "h", replace_history)
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_map")
        # uuid7-like ids that sort by time, as the engine's do (scheduler/ids.py): newest largest.
        cursor.execute(
            "CREATE TEMP TABLE bench_map AS SELECT n, "
            "(lpad(to_hex((extract(epoch FROM at) * 1000)::bigint), 12, '0') || '7' || "
            "substr(md5(n::text), 1, 3) || '8' || substr(md5(n::text), 4, 15))::uuid AS run_id, at "
            "FROM (SELECT n, %s::timestamptz - make_interval(mins => n) AS at "
            "FROM generate_series(1, %s) AS n) AS t",
            [template_run.created_at, copies],
        )
        cursor.execute(
            f"INSERT INTO scheduler_run ({run_cols}) SELECT {run_vals} FROM scheduler_run r, bench_map m "
            "WHERE r.id = %s",
            [template_run.pk],
        )
        cursor.execute(
            f"INSERT INTO scheduler_step ({step_cols}) SELECT {step_vals} FROM scheduler_step s, bench_map m "
            "WHERE s.run_id = %s",
            [template_run.pk],
        )
        cursor.execute(
            f"INSERT INTO scheduler_taskexecutionhistory ({hist_cols}) SELECT {hist_vals} "
            "FROM scheduler_taskexecutionhistory h CROSS JOIN bench_map m "
            "JOIN scheduler_step s2 ON s2.run_id = m.run_id WHERE h.run_id = %s",
            [template_run.pk],
        )
        # As autovacuum leaves tables after a bulk insert (its insert threshold): statistics, and
        # the visibility map that lets an index-only scan skip the heap.
        cursor.execute("VACUUM ANALYZE scheduler_run, scheduler_step, scheduler_taskexecutionhistory")


def fill(*, runs: int, body_bytes: int) -> tuple[Any, Any, str]:
    """The user, the job and an API token key; `runs` runs of the job with outputs."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection, transaction

    from agents.http_call import result_headers
    from bench.common import truncate_engine
    from sasproject.tokens.services import api_token_rotate
    from scheduler.models import Job, Run, Step
    from scheduler.services import step_claim_due, step_reply
    from scheduler.services.jobs import job_create, job_run_now

    truncate_engine()
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE scheduler_job CASCADE")
    get_user_model().objects.filter(username="outputs-bench").delete()
    user = get_user_model().objects.create_user(username="outputs-bench")
    settings.SAS = {**settings.SAS, "CLAIM_ON_SUBMIT": False}
    job = job_create(
        by_staff=False,
        owner_id=user.pk,
        name="Ping the partner",
        workflow="http.call",
        input={"method": "POST", "url": _echo_url(), "body": {"a": 1}},
        cron="* * * * *",
        timezone_name="Europe/Berlin",
    )
    firing = job_run_now(job_id=job.pk, by_staff=False)
    with transaction.atomic():
        (claim,) = step_claim_due(instance="bench", limit=1, run_id=firing.run_id)
    headers = {
        "Content-Type": "application/json",
        "Content-Length": str(body_bytes),
        "Date": "Sun, 29 Nov 2026 09:00:00 GMT",
        "ETag": '"33a64df551425fcc55e4d42a148795d9f25f89d4"',
        "Location": "https://partner.example.com/api/v2/things/0190f3a4-5b6c-7d8e-9f00-112233445566",
    }
    import httpx

    result = {
        "status": 200,
        "content_type": "application/json",
        "headers": result_headers(httpx.Headers(headers)),
        "body": "x" * body_bytes,
        "body_truncated": False,
    }
    step_reply(
        step_id=claim.step_id, lease=str(claim.lease), outcome="success", result=result, claim_next=False
    )
    assert firing.run_id is not None
    template = Run.objects.get(pk=firing.run_id)
    assert template.state == Run.State.COMPLETED, template.state
    assert Step.objects.get(run=template).result is not None
    _clone(template_run=template, copies=runs - 1, body_bytes=body_bytes)
    assert Run.objects.filter(job=job).count() == runs
    key = api_token_rotate(user_id=user.pk).key
    return user, Job.objects.get(pk=job.pk), key


def _echo_url() -> str:
    import os

    return os.environ["SIMULATOR_URL"].rstrip("/") + "/echo"


def _cases(job_id: int, picked: list[Any], runs: int) -> list[tuple[str, str, list[str]]]:
    """(name, client, URLs) of the requests timed."""
    last = -(-runs // 20)
    return [
        ("run page (random run)", "web", [f"/jobs/{job_id}/runs/{r}/" for r in picked]),
        ("job page, runs page 1", "web", [f"/jobs/{job_id}/"]),
        (f"job page, runs page {last} (last)", "web", [f"/jobs/{job_id}/?runs={last}"]),
        ("runs API, page 1", "api", [f"/api/jobs/{job_id}/runs/"]),
        (f"runs API, page {last} (last)", "api", [f"/api/jobs/{job_id}/runs/?page={last}"]),
        ("progress API (random run)", "api", [f"/api/runs/{r}/progress/" for r in picked]),
    ]


def time_requests(get: Any, urls: list[str], *, samples: int) -> dict[str, Any]:
    """Wall-clock and CPU (this process: view, ORM, template) seconds of `samples` requests after
    a warm-up, and the queries the first one made."""
    from django.db import connection

    for url in urls[:5]:  # warm-up: plans, templates, caches
        get(url, secure=True)
    statements: list[str] = []

    def counted(execute: Any, sql: str, *rest: Any) -> Any:
        statements.append(sql)
        return execute(sql, *rest)

    with connection.execute_wrapper(counted):
        get(urls[0], secure=True)
    wall, cpu = [], []
    for i in range(samples):
        url = urls[i % len(urls)]
        began, began_cpu = time.perf_counter(), time.process_time()
        response = get(url, secure=True)
        wall.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
        assert response.status_code == 200, (url, response.status_code)
    return {"wall": wall, "cpu": cpu, "queries": len(statements)}


def measure(*, job_id: int, key: str, runs: int, samples: int) -> dict[str, Any]:
    """Every case, timed in this process through Django's test client."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    from scheduler.models import Run

    run_ids = sorted(Run.objects.filter(job_id=job_id).values_list("pk", flat=True))
    random.seed(28)
    picked = random.sample(run_ids, min(len(run_ids), 200))
    web = Client()
    web.force_login(get_user_model().objects.get(username="outputs-bench"))
    clients = {"web": web, "api": Client(HTTP_AUTHORIZATION=f"Token {key}")}
    return {
        name: time_requests(clients[client].get, urls, samples=samples)
        for name, client, urls in _cases(job_id, picked, runs)
    }


def _child(variant: Variant, args: argparse.Namespace, *mode: str) -> dict[str, Any]:
    """This script in a process of its own, running `variant`'s product code (its bench/common.py,
    settings and templates too) against `variant`'s database; its RESULT line."""
    command = [sys.executable, str(Path(__file__).resolve()), "--code", str(variant.code), *mode]
    command += [
        "--runs",
        str(args.runs),
        "--samples",
        str(args.samples),
        "--body-bytes",
        str(args.body_bytes),
    ]
    env = {**os.environ, "SAS_BENCH_DB": variant.database}
    done = subprocess.run(command, cwd=variant.code, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{variant.name} {' '.join(mode)} failed:\n{done.stdout}\n{done.stderr}")
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return dict(json.loads(line.removeprefix("RESULT ")))


@dataclass(frozen=True)
class Variant:
    name: str
    code: Path
    database: str


def _figures(results: list[dict[str, Any]], case: str) -> str:
    wall = [t for r in results for t in r[case]["wall"]]
    cpu = [t for r in results for t in r[case]["cpu"]]
    queries = results[0][case]["queries"]
    return (
        f"p50 {fmt_ms(percentile(wall, 0.5))} / p99 {fmt_ms(percentile(wall, 0.99))}, "
        f"CPU p50 {fmt_ms(percentile(cpu, 0.5))}, {queries} queries"
    )


def _compare(variants: list[Variant], args: argparse.Namespace, filled: dict[str, Any], rounds: int) -> None:
    """Each variant `rounds` times, the order alternating (the machine's drift falls on both);
    each case's samples of all rounds together."""
    results: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    for round_ in range(rounds):
        for v in variants if round_ % 2 == 0 else list(reversed(variants)):
            ids = filled[v.name]
            mode = ("--measure", "--job-id", str(ids["job_id"]), "--key", ids["key"])
            results[v.name].append(_child(v, args, *mode))
    for case in results[variants[0].name][0]:
        print(f"  {case}")
        print_table([(f"  {v.name}", _figures(results[v.name], case)) for v in variants])


def storage() -> dict[str, float]:
    """What the outputs take on disk. pg_column_size: the stored datum (after TOAST's compression,
    if any). The table size: the results alone copied into a table of their own (heap + TOAST +
    page fill), divided by the rows - what they add to the step table. (Setting them NULL and
    VACUUM FULL would measure the same, but dead rows stay while any transaction on the server
    is older than the UPDATE: on a shared machine the figure came out negative.)"""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), avg(pg_column_size(result)), avg(pg_column_size(result->'headers')), "
            "avg(octet_length(result::text)) FROM scheduler_step WHERE result IS NOT NULL"
        )
        count, result_size, headers_size, text_size = cursor.fetchone()
        cursor.execute("DROP TABLE IF EXISTS bench_results")
        cursor.execute(
            "CREATE TABLE bench_results AS SELECT result FROM scheduler_step WHERE result IS NOT NULL"
        )
        cursor.execute(
            "SELECT pg_total_relation_size('bench_results'), pg_total_relation_size('scheduler_step')"
        )
        results_table, step_table = cursor.fetchone()
        cursor.execute("DROP TABLE bench_results")
    return {
        "steps with an output": count,
        "result as JSON text (avg bytes)": float(text_size),
        "result stored, pg_column_size (avg bytes)": float(result_size),
        "  of which headers (avg bytes)": float(headers_size),
        "results alone, pg_total_relation_size / rows": results_table / count,
        "step table, pg_total_relation_size / rows": step_table / count,
    }


def _null_results() -> None:
    """Every result NULL (nothing to show): what showing outputs costs is the difference."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("UPDATE scheduler_step SET result = NULL")
        cursor.execute("VACUUM ANALYZE scheduler_step")


def _in_variant(args: argparse.Namespace) -> dict[str, Any]:
    """What a variant's process was asked to do (--fill, --measure or --null-results)."""
    bench_environment(migrate=args.fill)
    from django.conf import settings

    # Production serves hashed names from collectstatic's manifest; no collectstatic here: the
    # plain storage (a path join, like the manifest's dict lookup) renders the same pages.
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    if args.fill:
        began = time.perf_counter()
        _user, job, key = fill(runs=args.runs, body_bytes=args.body_bytes)
        took = time.perf_counter() - began
        return {
            "job_id": job.pk,
            "key": key,
            "seconds": took,
            "storage": storage(),
            **page_bytes(job.pk, key),
        }
    if args.null_results:
        _null_results()
        return {}
    return measure(job_id=args.job_id, key=args.key, runs=args.runs, samples=args.samples)


def page_bytes(job_id: int, key: str) -> dict[str, int]:
    from django.test import Client

    sample = Client(HTTP_AUTHORIZATION=f"Token {key}").get(f"/api/jobs/{job_id}/runs/", secure=True)
    output = sample.json()["results"][0]["outputs"][0]
    return {
        "runs API page, bytes": len(sample.content),
        "one output's excerpt, bytes": len(output["excerpt"].encode()),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--body-bytes", type=int, default=4096)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every variant, with outputs")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a checkout of the code to compare with (e.g. main's, from git archive): it fills a "
        "database of its own (SAS_BENCH_DB + '_baseline', its own migrations) and is measured in "
        "turn with this one",
    )
    # A variant's process (see _child).
    parser.add_argument("--code", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--fill", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--null-results", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--job-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fill or args.measure or args.null_results:
        print("RESULT " + json.dumps(_in_variant(args)))
        return

    variants = [Variant("this checkout", REPO_DIR, BENCH_DB)]
    if args.baseline is not None:
        variants.append(Variant("baseline", args.baseline.resolve(), f"{BENCH_DB}_baseline"))
    filled = {v.name: _child(v, args, "--fill") for v in variants}
    ours = filled[variants[0].name]
    print(f"filled {args.runs} runs with {args.body_bytes}-byte bodies in {ours['seconds']:.1f} s")
    print(f"with outputs ({args.rounds} rounds of {args.samples} requests a case and variant):")
    _compare(variants, args, filled, args.rounds)
    print_table([(k, ours[k]) for k in ("runs API page, bytes", "one output's excerpt, bytes")])
    print_table([(k, f"{v:,.0f}") for k, v in ours["storage"].items()])
    for v in variants:
        _child(v, args, "--null-results")
    print("no outputs (1 round):")
    _compare(variants, args, filled, 1)


if __name__ == "__main__":
    main()

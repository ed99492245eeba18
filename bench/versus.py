"""What a change costs the engine: this tree against another revision, side by side in one run.

    python bench/versus.py --base REV [--rounds 4] [--orders 300] [--latency-samples 100]
                           [--concurrency 2] [--noop-tasks 500]

Each round runs bench/engine.py once in this tree and once in REV's (a detached git worktree,
made on first use under the system's temp folder), alternating which goes first, each on a bench
database of its own migrated by its own code (`SAS_BENCH_DB`), with this tree's virtualenv (the
pinned requirements; a difference in REV's requirements.txt is printed as a warning). From each
run: the engine's orders/s over a burst of --orders 3-step orders, its p50 / p99 submit ->
Completed over --latency-samples orders one at a time, and the bare Celery no-op tasks/s that
bench/engine.py measures first - the machine's drift made visible (it does not change between
trees). The table shows each figure's median over the rounds and each ratio (this tree : REV,
taken within a round) as median [range].

Every change of an issue is measured this way against the commit before it (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.common import fmt_ms, print_table  # noqa: E402 (after the path is set)


def base_tree(rev: str) -> Path:
    """A detached worktree of `rev` (made once; reused while it is at that commit)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    tree = Path(tempfile.gettempdir()) / f"sas-versus-{commit[:12]}"
    if not (tree / "bench" / "engine.py").exists():
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, check=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), commit], cwd=REPO, check=True)
    ours = (REPO / "requirements.txt").read_text()
    if (tree / "requirements.txt").read_text() != ours:
        print(f"warning: {rev}'s requirements.txt differs from this tree's; both run on this virtualenv")
    return tree


def median_ratio(head: list[dict[str, float]], base: list[dict[str, float]], key: str) -> str:
    """`key` of this tree : the base's, taken within each round: "median [min-max]"."""
    values = [h[key] / b[key] for h, b in zip(head, base, strict=True)]
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def engine_run(tree: Path, *, database: str, args: argparse.Namespace) -> dict[str, float]:
    """One bench/engine.py run in `tree`; its figures for the one worker layout asked."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = {**os.environ, "SAS_BENCH_DB": database, "PYTHONPATH": str(tree)}
        subprocess.run(
            [
                sys.executable,
                "bench/engine.py",
                "--orders",
                str(args.orders),
                "--latency-samples",
                str(args.latency_samples),
                "--noop-tasks",
                str(args.noop_tasks),
                "--concurrency",
                str(args.concurrency),
                "--json",
                out.name,
            ],
            cwd=tree,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        figures: dict[str, Any] = json.loads(Path(out.name).read_text())[f"c{args.concurrency}"]
    return {
        "orders_per_s": figures["engine_orders_per_s"],
        "p50": figures["engine_latency_p50"],
        "p99": figures["engine_latency_p99"],
        "bare_tasks_per_s": figures["bare_tasks_per_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the revision to compare with (a commit, a branch)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--orders", type=int, default=300)
    parser.add_argument("--latency-samples", type=int, default=100)
    parser.add_argument("--noop-tasks", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=2)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    trees = {"this tree": REPO, args.base: base_tree(args.base)}
    databases = {"this tree": "sasproject_bench_versus_head", args.base: "sasproject_bench_versus_base"}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for index in range(args.rounds):
        order = list(trees) if index % 2 == 0 else list(reversed(trees))
        for name in order:
            figures = engine_run(trees[name], database=databases[name], args=args)
            results[name].append(figures)
            print(
                f"round {index + 1} {name:>12s}: {figures['orders_per_s']:6.1f} orders/s  "
                f"p50 {fmt_ms(figures['p50'])}  p99 {fmt_ms(figures['p99'])}  "
                f"(bare Celery {figures['bare_tasks_per_s']:.0f} tasks/s)",
                flush=True,
            )

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    def ratio(key: str) -> str:
        return median_ratio(results["this tree"], results[args.base], key)

    print(
        f"\n{args.rounds} rounds, {args.orders} orders + {args.latency_samples} one at a time, "
        f"1 worker x {args.concurrency} processes; this tree against {args.base}"
    )
    rows = []
    for name in trees:
        rows += [
            (f"{name}: orders/s (median)", f"{med(name, 'orders_per_s'):.1f}"),
            (f"{name}: p50 / p99 (median)", f"{fmt_ms(med(name, 'p50'))} / {fmt_ms(med(name, 'p99'))}"),
            (f"{name}: bare Celery tasks/s (median)", f"{med(name, 'bare_tasks_per_s'):.0f}"),
        ]
    rows += [
        ("this tree : base, orders/s", ratio("orders_per_s")),
        ("this tree : base, p50", ratio("p50")),
        ("this tree : base, p99", ratio("p99")),
        ("this tree : base, bare Celery tasks/s (drift)", ratio("bare_tasks_per_s")),
    ]
    print_table(rows)


if __name__ == "__main__":
    main()

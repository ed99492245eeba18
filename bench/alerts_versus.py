"""Alert evaluation before and after a change, side by side in one run (issue 27: "tick p50 and
p99 before and after the moves").

    python bench/alerts_versus.py --base REV [--rounds 4] [--history 1000000] [--rules 50] [--samples 30]

Runs bench/alerts.py in this tree and in REV's (bench/versus.py's detached worktree), each on a
bench database of its own migrated by its own code (`SAS_BENCH_DB`). Each tree's database is
filled once with --history attempt rows (200,000 runs over 30 days, as bench/alerts.py says) and
kept; then --rounds rounds alternate which tree goes first, each timing --samples ticks of
--rules rules over the same rows (`--no-fill --keep`). The table gives each tree's tick p50 and
p99 (median over the rounds) and this tree : REV as median [range]. The rows are deleted at the
end. Target (issue 27): tick p50 <= 50 ms, unchanged or better.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.versus import base_tree, median_ratio  # noqa: E402 (after the path is set)

FIGURE = re.compile(r"^\s*tick (p50|p99)\s+([\d.]+) ms\s*$", re.MULTILINE)


def alerts_run(
    tree: Path, *, database: str, args: argparse.Namespace, fill: bool, keep: bool
) -> dict[str, float]:
    """One bench/alerts.py run in `tree`: its tick p50 and p99 in seconds."""
    env = {**os.environ, "SAS_BENCH_DB": database, "PYTHONPATH": str(tree)}
    command = [
        sys.executable,
        "bench/alerts.py",
        "--history",
        str(args.history),
        "--rules",
        str(args.rules),
        "--samples",
        str(args.samples),
    ]
    command += [] if fill else ["--no-fill"]
    command += ["--keep"] if keep else []
    out = subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
    figures = {name: float(value) / 1000 for name, value in FIGURE.findall(out)}
    if set(figures) != {"p50", "p99"}:
        raise RuntimeError(f"no tick figures in bench/alerts.py's output in {tree}:\n{out[-2000:]}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", required=True, help="the revision to compare with (a commit, a branch)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--rules", type=int, default=50)
    parser.add_argument("--samples", type=int, default=30)
    args = parser.parse_args()
    if args.rounds < 1 or args.samples < 2:
        parser.error("--rounds must be at least 1 and --samples at least 2")
    trees = {"this tree": REPO, args.base: base_tree(args.base)}
    databases = {"this tree": "sasproject_bench_alerts_head", args.base: "sasproject_bench_alerts_base"}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for name in trees:
        print(f"filling {name}'s database with {args.history:,} history rows ...", flush=True)
        alerts_run(trees[name], database=databases[name], args=args, fill=True, keep=True)
    for index in range(args.rounds):
        order = list(trees) if index % 2 == 0 else list(reversed(trees))
        last = index == args.rounds - 1
        for name in order:
            figures = alerts_run(trees[name], database=databases[name], args=args, fill=False, keep=not last)
            results[name].append(figures)
            print(
                f"round {index + 1} {name:>12s}: tick p50 {figures['p50'] * 1000:.1f} ms"
                f"  p99 {figures['p99'] * 1000:.1f} ms",
                flush=True,
            )

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in results[name])

    def ratio(key: str) -> str:
        return median_ratio(results["this tree"], results[args.base], key)

    print(
        f"\n{args.rounds} rounds of {args.samples} ticks, {args.rules} rules over"
        f" {args.history:,} history rows;"
        f" this tree against {args.base}"
    )
    for name in trees:
        verdict = "MET" if med(name, "p50") <= 0.05 else "MISSED"
        print(
            f"  {name}: tick p50 {med(name, 'p50') * 1000:.1f} ms, p99 {med(name, 'p99') * 1000:.1f} ms"
            f" (target p50 <= 50 ms: {verdict})"
        )
    print(f"  this tree : {args.base}, tick p50  {ratio('p50')}")
    print(f"  this tree : {args.base}, tick p99  {ratio('p99')}")


if __name__ == "__main__":
    main()

"""A newcomer's path, timed (issue 31's benchmark): in a copy of the repository, the scaffold
(`manage.py startworkflow NAME`), then the workflow's own tests (`pytest tests/NAME`), each a
separate command as a developer types them; printed: the wall time of each, pytest's own time
for the tests (without its session set-up: the test database), and the target's ratio.

    python bench/newcomer.py [--name greeting] [--rounds 1]

The three-step workflow and its four harness tests are added when the virtual-clock harness
(issue 31, item 3) is merged: this script then times them the same way; the target is those
tests under 2 s. Run with DATABASE_URL / REDIS_URL set (`eval "$(python -m devservices env)"`).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sastools.repo_copy import VENV_BIN, repository_copy  # noqa: E402

TESTS_TARGET_S = 2.0


def _timed(copy: Path, *args: str) -> tuple[float, str]:
    began = time.perf_counter()
    result = subprocess.run(args, cwd=copy, capture_output=True, text=True, env=dict(os.environ))
    elapsed = time.perf_counter() - began
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return elapsed, result.stdout


def one_round(name: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="newcomer-") as tmp:
        copy = repository_copy(Path(tmp))
        scaffold, _ = _timed(copy, str(VENV_BIN / "python"), "manage.py", "startworkflow", name)
        tests, out = _timed(
            copy, str(VENV_BIN / "pytest"), "-p", "no:cacheprovider", "-q", "--durations=0", f"tests/{name}"
        )
        calls = [float(s) for s in re.findall(r"^([\d.]+)s call ", out, re.M)]
        return {
            "scaffold_s": scaffold,
            "tests_wall_s": tests,
            "tests_calls_s": sum(calls),
            "tests": len(calls),
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="greeting")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    rows = [one_round(args.name) for _ in range(args.rounds)]
    print(f"newcomer's path, {args.rounds} round(s), app {args.name!r}")
    header = ("round", "scaffold s", "tests wall s", "tests calls s", "tests", "calls/target")
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, (5, 11, 13, 14, 6, 13), strict=True)))
    for i, row in enumerate(rows, 1):
        ratio = row["tests_calls_s"] / TESTS_TARGET_S
        print(
            f"{i:>5} {row['scaffold_s']:>11.2f} {row['tests_wall_s']:>13.2f} {row['tests_calls_s']:>14.2f}"
            f" {int(row['tests']):>6} {ratio:>13.2f}"
        )
    print(
        "tests wall: pytest's whole session (its own test database made first); tests calls: the"
        f" tests' own time (pytest --durations), against the {TESTS_TARGET_S:.0f} s target"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

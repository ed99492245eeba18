"""A newcomer's path, timed (issue 31's benchmark): the developers' guide
(docs/developing/workflows.md) followed block by block in a copy of the repository, as a
developer types it - `manage.py startworkflow greeting`, its tests, a three-step saga written
from the guide, and the saga's four harness tests (sastools/guide.py reads the blocks, the same
reader the guide's test uses). Printed: each block's wall time, and the four saga tests' own
time (pytest --durations: without the session's set-up, the test database) against the 2 s
target.

    python bench/newcomer.py [--rounds 1]

Run with DATABASE_URL / REDIS_URL set (`eval "$(python -m devservices env)"`).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sastools.guide import GuideResult, guide_block_run, guide_blocks  # noqa: E402
from sastools.repo_copy import repository_copy  # noqa: E402

TESTS_TARGET_S = 2.0
SAGA_TESTS = "tests/greeting/test_saga.py"


def _test_seconds(stdout: str) -> float:
    """The tests' own time: setup, call and teardown of each (pytest --durations=0)."""
    return sum(float(s) for s in re.findall(r"^([\d.]+)s (?:setup|call|teardown) ", stdout, re.M))


def one_round() -> list[GuideResult]:
    with tempfile.TemporaryDirectory(prefix="newcomer-") as tmp:
        copy = repository_copy(Path(tmp))
        results = []
        for block in guide_blocks():
            result = guide_block_run(copy, block)
            if result.returncode != 0:
                raise SystemExit(f"{block.text} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
            results.append(result)
        return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for n in range(1, args.rounds + 1):
        results = one_round()
        print(f"round {n}: the guide's blocks, in order")
        total = 0.0
        for r in results:
            total += r.seconds
            print(f"  {r.seconds:8.2f} s  {r.block.title[:90]}")
        (saga,) = [r for r in results if SAGA_TESTS in r.block.text]
        tests_s = _test_seconds(saga.stdout)
        print(f"  {total:8.2f} s  the whole path, scaffold to the saga's tests green")
        print(
            f"  the saga's four harness tests: {tests_s:.2f} s of their own"
            f" ({saga.seconds:.2f} s with pytest's start and the test database);"
            f" target {TESTS_TARGET_S:.0f} s, ratio {tests_s / TESTS_TARGET_S:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

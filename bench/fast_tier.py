"""The fast tier's start-up (issue 27 item 7): what collecting `make test-fast`'s tests costs one
pytest process with no bytecode cache (as each xdist worker paid it on every run while
PYTHONDONTWRITEBYTECODE=1 kept pytest and Python from writing one) and with the caches a
previous run wrote (tests/envsetup.py). CPU seconds of the pytest process (user + system),
which a machine shared with other work inflates less than wall time; rounds alternate.

    python -m bench.fast_tier [--rounds 2]

Needs DATABASE_URL / REDIS_URL (`eval "$(.venv/bin/python -m devservices env)"`): the test
process configures its template database before it collects. The whole tier's wall time is
printed by `make test-fast` itself.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FAST_TIER = "not live and not browser and not deploy"


def collect(cache_dir: str) -> tuple[float, float]:
    """(CPU s, wall s) of one `pytest --collect-only` of the fast tier, caches under cache_dir."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": cache_dir}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", FAST_TIER],
        cwd=REPO,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    cold: list[float] = []
    warm: list[float] = []
    for round_no in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory(prefix="sas-pycache-") as cache_dir:
            cpu_cold, wall_cold = collect(cache_dir)  # nothing cached: compile and rewrite all
            cpu_warm, wall_warm = collect(cache_dir)  # what the first wrote
        cold.append(cpu_cold)
        warm.append(cpu_warm)
        print(
            f"round {round_no}: no cache {cpu_cold:6.1f} s CPU ({wall_cold:6.1f} s wall)   "
            f"cached {cpu_warm:6.1f} s CPU ({wall_warm:6.1f} s wall)"
        )
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"collect, median CPU s per pytest process: no cache {c:.1f}, cached {w:.1f}, ratio {w / c:.2f}")


if __name__ == "__main__":
    main()

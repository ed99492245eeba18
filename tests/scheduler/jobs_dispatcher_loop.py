"""A jobs dispatcher in a separate OS process, ticking in a loop, for the concurrency test.

    python -m tests.scheduler.jobs_dispatcher_loop --name A --until <epoch seconds>

Prints one JSON line: {"name", "ticks", "started", "skipped", "errors": [...]}.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", required=True)
    parser.add_argument("--until", type=float, required=True)
    parser.add_argument("--interval", type=float, default=0.2)
    parser.add_argument("--batch", type=int, default=50)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")
    django.setup()
    from scheduler.services import jobs_dispatch

    ticks = started = skipped = 0
    errors: list[str] = []
    while time.time() < args.until:
        try:
            done = jobs_dispatch(instance=args.name, batch=args.batch)
            started += done.started
            skipped += done.skipped
        except Exception as exc:  # a test must see it, not a dead loop
            errors.append(f"{type(exc).__name__}: {exc}"[:500])
        ticks += 1
        time.sleep(args.interval)
    print(
        json.dumps(
            {"name": args.name, "ticks": ticks, "started": started, "skipped": skipped, "errors": errors}
        )
    )


if __name__ == "__main__":
    main()

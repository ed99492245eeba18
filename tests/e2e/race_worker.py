"""A separate OS process that claims or sweeps in a loop, for the concurrency tests.

    python -m tests.e2e.race_worker claim|sweep --name A --start-at <epoch seconds>

Prints one JSON line: {"name", "ids": [...]} of the step ids it claimed / decided.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import django


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["claim", "sweep"])
    parser.add_argument("--name", required=True)
    parser.add_argument("--start-at", type=float, required=True)
    # A folder both racers write a file into once they are ready (Django set up, connected);
    # each starts when both files are there - a late start of one (a loaded machine) then
    # cannot leave all the rows to the other.
    parser.add_argument("--barrier", default="")
    parser.add_argument("--batch", type=int, default=5)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")
    django.setup()
    from django.db import transaction

    from scheduler.services import step_claim_due
    from supervisor.services import step_expire_batch

    # Start together so the two processes really overlap.
    if args.barrier:
        from pathlib import Path

        from django.db import connection

        connection.ensure_connection()
        folder = Path(args.barrier)
        (folder / args.name).touch()
        deadline = time.time() + 60
        while len(list(folder.iterdir())) < 2 and time.time() < deadline:
            time.sleep(0.005)
    time.sleep(max(0.0, args.start_at - time.time()))
    ids: list[int] = []
    empty_rounds = 0
    while empty_rounds < 3:
        if args.mode == "claim":
            with transaction.atomic():
                got = [c.step_id for c in step_claim_due(instance=args.name, limit=args.batch)]
        else:
            got = step_expire_batch(batch=args.batch, instance=args.name).step_ids
        ids.extend(got)
        empty_rounds = empty_rounds + 1 if not got else 0
    print(json.dumps({"name": args.name, "ids": ids}), flush=True)


if __name__ == "__main__":
    main()
